"""Regeneration: curated prompts answered again by the target model on its inference server, crash-safe."""

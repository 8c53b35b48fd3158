"""Code that runs inside a serving engine's own process, not datahunt's: each module imports only the engine.

`datahunt_hidden_states.py` is loaded by vLLM (`kv_connector_module_path`) when the engine's torch has no
CUDA: the folder is put on the engine's `PYTHONPATH` by the launch line `datahunt vllm-command --extract`
prints. Nothing in datahunt imports these modules.
"""

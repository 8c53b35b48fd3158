"""Search backends behind one protocol: the Hub API, web search, and the embedded offline index."""

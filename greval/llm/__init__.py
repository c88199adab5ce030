"""How a model is called: judge configuration, the call path, retries, the rate limiter and the embedded
llama.cpp judge. Knows nothing of specs."""

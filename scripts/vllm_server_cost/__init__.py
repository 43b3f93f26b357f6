"""The parts of ``scripts/vllm_server_cost_run.py``: the request, what the API server pays, the servers, the report."""

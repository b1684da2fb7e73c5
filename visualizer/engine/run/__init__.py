"""Running captures: the runner's queues, the worker processes, the visitors' sandbox and its wire, the cluster."""

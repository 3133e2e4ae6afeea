"""kvsim held against real vLLM: measured runs read (``h100``, ``rtx4090``, ``catalog``), replayed
at their recorded arrivals on their own settings (``replay``), compared per request and per stage
(``errors``), set beside other simulators (``peers``, ``table``, ``markdown``), and the step cost's
free parameters fitted on the train split (``fit``, ``calibration``). ``docs/validate.md`` has the
formats and the error table."""

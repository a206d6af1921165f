"""Black-box correctness probes of a running cluster (`deskside probe`).

Each probe asks the running engine (and the LiteLLM proxy in front of it) something whose
right answer is known, and judges the answer: PASS, FAIL or SKIPPED, with a one-line why.

- `batch`: greedy output of one prompt alone equals its output beside other requests.
- `doors`: every served name answers through the proxy with its master key and directly
  with the engine's key, and neither door answers without its key.
- `tools`: a forced tool call comes back with JSON-object arguments.
- `reasoning`: a stop string inside the reasoning does not end the answer, when the
  recipe asks the engine for that.
- `context`: a prompt that fills max_model_len is served.

The modules above build requests and judge responses and do no I/O; `client` sends them
over HTTP, `keys` reads the keys, `target` says what to probe.
"""

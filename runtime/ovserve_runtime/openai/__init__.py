"""The OpenAI protocol layer: pure functions and typed models, no I/O.

request    the request bodies (chat completions, completions) and their 400 errors
support    which field each pipeline honours or refuses (the docs table and the pipeline checks)
sampling   a request's generation parameters (the GenerationConfig fields it sets)
grammar    constrained output: response_format -> a compact regex or grammar
prompt     chat prompt assembly (messages -> the chat template's input, image placeholders)
responses  response bodies and stream chunks
errors     ApiError, the OpenAI error object

The transport (routes, admission, the SSE writer) is ovserve_runtime.http.
"""

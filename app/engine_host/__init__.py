"""The engine host: the one worker thread that owns the resident model, and everything that
talks to it.

Requests go in (engine_requests) and events come out (events) through one client
(engine_client); the worker runs the loop, its activities (a conversation turn, API
clients, a summary job) share each step, and model_controls loads, re-plans and reshapes
the model between steps. The window reaches its engine through engine_router, which sends
a model split onto lent computers to a child process (child_engine, child_engine_process)
so that a lost computer ends the child, not the window; early_engine starts the window's
load before Qt is imported.
"""

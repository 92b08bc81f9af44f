"""The processes: one wiring and one lifecycle for `api`, `daemon`, `broker` and `dev`.

- `dependencies`: what a component is built from (clock, store, queue, metrics,
  HTTP client, tracing, an instance id), and the real ones for a process.
- `build`: `build_api`, `build_daemon`, `build_broker`: settings + dependencies in,
  a component out; nothing in them reads the environment, the real clock or a global,
  so the simulation builds its cluster with these same functions.
- `lifecycle`: start in order (dependencies retried until they answer, SIGTERM
  honoured meanwhile), run, stop in reverse within the grace.
- `commands`: the three production processes, each a lifecycle over real dependencies.
- `args`: the command-line flags of every service command.
"""

// Package importgraph holds no code: its test checks the module's import graph
// against the layering the packages' docs describe (issue 36). The YAML schema
// (configs) knows neither the engine (nor any package of its tree) nor the
// gateway, and no package but cmd's knows configs (cmd/lmlite converts the file);
// the engine knows no Prometheus and no HTTP
// (it exports plain Stats, which enginemetrics turns into series and the gateway
// into admin JSON); the workers mode's shared types (engine/workerapi) know nothing
// of the module; and no package depends on one above it in the tree (no arrow
// upward: engine/worker does not reach engine, nor gateway/openai gateway). Go
// itself refuses import cycles.
package importgraph

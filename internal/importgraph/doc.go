// Package importgraph holds no code: its test checks the module's import graph
// against the layering the packages' docs describe (issue 36). The YAML schema (configs) knows
// neither the engine nor the gateway; the engine knows no Prometheus and no HTTP
// (presentation is the edge's: cmd/lmlite and the gateway turn the engine's Stats
// into series and JSON); the gateway does not know the configuration file's format
// (cmd/lmlite converts it). Go itself refuses import cycles.
package importgraph

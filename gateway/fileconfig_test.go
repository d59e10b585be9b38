package gateway

import (
	"os"
	"time"

	"github.com/lmlite/lmlite/configs"
	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/engine/spec"
)

// The gateway does not know the configuration file (cmd/lmlite converts it), but its
// tests write their fixtures in it: configOf, adaptersOf and engineConfigOf are the
// fixtures' conversions, the same as cmd/lmlite's gatewayConfig, adaptersOf and
// engineModelConfig, whose own tests (TestGatewayConfig, TestEngineModelConfig)
// check them field by field.

// configOf is the gateway's Config of a validated file.
func configOf(c *configs.Config) (Config, error) {
	book, err := c.Book()
	if err != nil {
		return Config{}, err
	}
	gc := Config{MaxBodyBytes: c.MaxBodyBytes, MaxInFlight: c.MaxInFlight, WriteTimeout: c.WriteTimeout, Tiers: *c.Set(), Book: book,
		MaxKeepAlive: c.MaxKeepAlive, MinKeepAlive: c.MinKeepAlive}
	for i := range c.Models {
		mc := &c.Models[i]
		m := Model{ID: mc.ID, MaxModelLen: mc.MaxModelLen, Slots: mc.MaxConcurrency * max(1, mc.Replicas),
			MaxQueue: mc.MaxQueue, Price: mc.Price(), OwnedBy: mc.OwnedBy, IdleTimeout: mc.IdleTimeout}
		if u := mc.Upstream; u != nil {
			m.Upstream = &Upstream{BaseURL: u.BaseURL, Model: u.Model, Timeout: u.Timeout}
			if m.Upstream.Model == "" {
				m.Upstream.Model = mc.ID
			}
			if u.APIKeyEnv != "" {
				m.Upstream.APIKey = os.Getenv(u.APIKeyEnv)
			}
		}
		gc.Models = append(gc.Models, m)
	}
	for _, a := range c.Adapters {
		gc.Adapters = append(gc.Adapters, Adapter{ID: a.ID, Base: a.Base, Tenant: a.Tenant})
	}
	return gc, nil
}

// adaptersOf is the engine's configuration of the adapters over the model id.
func adaptersOf(c *configs.Config, id string) []engine.AdapterConfig {
	var out []engine.AdapterConfig
	for _, a := range c.Adapters {
		if a.Base == id {
			out = append(out, engine.AdapterConfig{ID: a.ID, Path: a.Path, Scale: a.Scale})
		}
	}
	return out
}

// engineConfigOf is the engine's configuration of an embedded model of a validated
// file.
func engineConfigOf(m *configs.Model) engine.ModelConfig {
	bytes := func(s string) int64 { n, _ := configs.ParseBytes(s); return n }
	return engine.ModelConfig{
		ID: m.ID, Path: m.File(), MaxModelLen: m.MaxModelLen, MaxModelConcurrency: m.MaxConcurrency,
		BatchExecuteTimeout: time.Duration(m.BatchTimeoutMS) * time.Millisecond, Replicas: m.Replicas,
		IdleTimeout: m.IdleTimeout, Priority: m.Priority, Device: m.Device, MaxQueue: m.MaxQueue,
		BatchChunkTokens: max(m.BatchChunk, 0), AttnF32MinPrompt: m.AttnF32MinPrompt, Speculative: spec.Config{NGram: m.Speculative.NGram, MaxDraft: m.Speculative.MaxDraft,
			DraftCost: m.Speculative.DraftCost, IgnorePrediction: m.Speculative.IgnorePrediction, Pool: m.Speculative.Pool,
			DraftModel: m.Speculative.DraftModel},
		GrammarMaskSteps: m.GrammarMaskSteps, GrammarRequestSteps: m.GrammarRequestSteps,
		KVCacheBytes: bytes(m.KVCache), KVWarmBytes: bytes(m.KVWarm), AdapterMemory: bytes(m.AdapterMemory), KVWarmFile: m.KVWarmFile,
		KVCacheTypeK: m.KVCacheTypeK, KVCacheTypeV: m.KVCacheTypeV,
		DisablePrefixCache: m.DisablePrefixCache, Embeddings: m.Embeddings,
	}
}

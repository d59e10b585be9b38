package main

import (
	"os"
	"time"

	"github.com/lmlite/lmlite/configs"
	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/engine/spec"
	"github.com/lmlite/lmlite/gateway"
)

// The configuration file (configs, the YAML schema) meets the packages it configures
// here and nowhere else: configs knows neither the engine nor the gateway, and they
// know no file format (internal/importgraph checks).

// engineModels are the engine's configurations of the file's embedded models, each
// with its LoRA adapters.
func engineModels(c *configs.Config) []engine.ModelConfig {
	var out []engine.ModelConfig
	for i := range c.Models {
		if c.Models[i].Embedded() {
			mc := engineModelConfig(&c.Models[i])
			mc.Adapters = adaptersOf(c, mc.ID)
			out = append(out, mc)
		}
	}
	return out
}

// engineModelConfig is the engine's configuration of an embedded model of a
// validated file (its adapters aside: adaptersOf).
func engineModelConfig(m *configs.Model) engine.ModelConfig {
	return engine.ModelConfig{
		ID:                  m.ID,
		Path:                m.File(),
		MaxModelLen:         m.MaxModelLen,
		MaxModelConcurrency: m.MaxConcurrency,
		BatchExecuteTimeout: time.Duration(m.BatchTimeoutMS) * time.Millisecond,
		Replicas:            m.Replicas,
		IdleTimeout:         m.IdleTimeout,
		Priority:            m.Priority,
		Device:              m.Device,
		MaxQueue:            m.MaxQueue,
		BatchChunkTokens:    max(m.BatchChunk, 0), // -1: none
		AttnF32MinPrompt:    m.AttnF32MinPrompt,
		Speculative:         speculative(m.Speculative),
		GrammarMaskSteps:    m.GrammarMaskSteps,
		GrammarRequestSteps: m.GrammarRequestSteps,
		KVCacheBytes:        mustBytes(m.KVCache),
		KVWarmBytes:         mustBytes(m.KVWarm),
		AdapterMemory:       mustBytes(m.AdapterMemory),
		KVWarmFile:          m.KVWarmFile,
		KVCacheTypeK:        m.KVCacheTypeK,
		KVCacheTypeV:        m.KVCacheTypeV,
		DisablePrefixCache:  m.DisablePrefixCache,
		Embeddings:          m.Embeddings,
	}
}

// speculative is the engine's configuration of a model's speculative: block.
func speculative(s configs.Speculative) spec.Config {
	return spec.Config{NGram: s.NGram, MaxDraft: s.MaxDraft, DraftCost: s.DraftCost, Measure: s.DraftCost == 0,
		IgnorePrediction: s.IgnorePrediction, Pool: s.Pool, DraftModel: s.DraftModel}
}

// mustBytes is configs.ParseBytes of a size that validation has checked.
func mustBytes(s string) int64 {
	n, _ := configs.ParseBytes(s)
	return n
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

// demoModelsOf are the file's models of generated demo models (AddDemoModels prices
// them).
func demoModelsOf(models []engine.ModelConfig) []configs.Model {
	out := make([]configs.Model, 0, len(models))
	for _, mc := range models {
		out = append(out, configs.Model{
			ID: mc.ID, Path: mc.Path, MaxModelLen: mc.MaxModelLen, MaxConcurrency: mc.MaxModelConcurrency,
			BatchTimeoutMS: int(mc.BatchExecuteTimeout / time.Millisecond), Replicas: mc.Replicas,
			IdleTimeout: mc.IdleTimeout, Priority: mc.Priority, Embeddings: mc.Embeddings,
		})
	}
	return out
}

// gatewayConfig is the gateway's Config of a validated file (the upstream API keys
// are read from their environment variables here).
func gatewayConfig(c *configs.Config) (gateway.Config, error) {
	book, err := c.Book()
	if err != nil {
		return gateway.Config{}, err
	}
	gc := gateway.Config{MaxBodyBytes: c.MaxBodyBytes, MaxInFlight: c.MaxInFlight, WriteTimeout: c.WriteTimeout, Tiers: *c.Set(), Book: book,
		MaxKeepAlive: c.MaxKeepAlive, MinKeepAlive: c.MinKeepAlive}
	for i := range c.Models {
		mc := &c.Models[i]
		m := gateway.Model{ID: mc.ID, MaxModelLen: mc.MaxModelLen, Slots: mc.MaxConcurrency * max(1, mc.Replicas),
			MaxQueue: mc.MaxQueue, Price: mc.Price(), OwnedBy: mc.OwnedBy, IdleTimeout: mc.IdleTimeout}
		if u := mc.Upstream; u != nil {
			m.Upstream = &gateway.Upstream{BaseURL: u.BaseURL, Model: u.Model, Timeout: u.Timeout}
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
		gc.Adapters = append(gc.Adapters, gateway.Adapter{ID: a.ID, Base: a.Base, Tenant: a.Tenant})
	}
	return gc, nil
}

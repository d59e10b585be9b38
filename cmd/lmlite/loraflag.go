package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/engine/model"
)

// loraFlag is the repeatable --lora FILE[:SCALE] of run and score: LoRA adapters
// in llama.cpp's GGUF format, each at a user scale (1 when absent), applied in
// order (llama.cpp's --lora and --lora-scaled).
type loraFlag []loraArg

type loraArg struct {
	path  string
	scale float32
}

const loraUsage = "LoRA adapter FILE[:SCALE] (GGUF, llama.cpp's format; SCALE default 1; repeatable, applied together)"

func (l *loraFlag) String() string {
	var s []string
	for _, a := range *l {
		s = append(s, fmt.Sprintf("%s:%g", a.path, a.scale))
	}
	return strings.Join(s, ",")
}

// Set parses FILE[:SCALE]: a suffix after the last colon that parses as a number is
// the scale, else the colon is part of the file name.
func (l *loraFlag) Set(v string) error {
	a := loraArg{path: v, scale: 1}
	if i := strings.LastIndexByte(v, ':'); i > 0 {
		if s, err := strconv.ParseFloat(v[i+1:], 32); err == nil {
			a.path, a.scale = v[:i], float32(s)
		}
	}
	if a.path == "" {
		return fmt.Errorf("no file in %q", v)
	}
	if a.scale == 0 {
		return fmt.Errorf("%s: a scale of 0 applies nothing (leave the adapter out)", a.path)
	}
	*l = append(*l, a)
	return nil
}

// open loads the adapters over m; the caller closes them.
func (l loraFlag) open(m *model.Model) ([]model.LoRA, error) {
	var loras []model.LoRA
	for _, a := range l {
		ad, err := m.OpenAdapter(a.path)
		if err != nil {
			for _, x := range loras {
				x.Adapter.Close()
			}
			return nil, err
		}
		loras = append(loras, model.LoRA{Adapter: ad, Scale: a.scale})
	}
	return loras, nil
}

// engine gives the adapters as a model's configuration (ids lora0, lora1, …) and
// the ids a request names to apply them all.
func (l loraFlag) engine() ([]engine.AdapterConfig, []string) {
	var cfgs []engine.AdapterConfig
	var ids []string
	for i, a := range l {
		id := fmt.Sprint("lora", i)
		cfgs = append(cfgs, engine.AdapterConfig{ID: id, Path: a.path, Scale: a.scale})
		ids = append(ids, id)
	}
	return cfgs, ids
}

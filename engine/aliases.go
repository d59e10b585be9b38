package engine

import (
	"context"
	"time"

	"github.com/lmlite/lmlite/engine/api"
	"github.com/lmlite/lmlite/engine/lease"
)

// The types of the Block API live in engine/api, which the workers mode's
// engine/worker shares without importing the engine; these aliases keep them the
// engine's own names. The errors are the same values, so errors.Is matches either.

type (
	ModelConfig   = api.ModelConfig
	AdapterConfig = api.AdapterConfig
	Config        = api.Config
	Priority      = api.Priority
	Sampling      = api.Sampling
	TokenBias     = api.TokenBias
	Message       = api.Message
	ToolCall      = api.ToolCall
	Tool          = api.Tool
	Request       = api.Request
	Token         = api.Token
	TopLogprob    = api.TopLogprob
	Usage         = api.Usage
	ModelState    = api.ModelState
	ModelStatus   = api.ModelStatus
	Stream        = api.Stream
	EmbedRequest  = api.EmbedRequest
	Embeddings    = api.Embeddings
	AdapterStatus = api.AdapterStatus
	DeviceStatus  = api.DeviceStatus
	DeviceLease   = api.DeviceLease
	Stats         = api.Stats
	TokenCheck    = api.TokenCheck
)

const (
	Interactive = api.Interactive
	Batch       = api.Batch

	DefaultMaxModelConcurrency = api.DefaultMaxModelConcurrency
	DefaultIdleTimeout         = api.DefaultIdleTimeout
	DefaultMaxQueue            = api.DefaultMaxQueue

	MaxTopLogprobs = api.MaxTopLogprobs
	MaxChoices     = api.MaxChoices

	FinishStop      = api.FinishStop
	FinishLength    = api.FinishLength
	FinishCancelled = api.FinishCancelled

	StateLoading  = api.StateLoading
	StateReady    = api.StateReady
	StateUnloaded = api.StateUnloaded
	StateFailed   = api.StateFailed

	AdapterLoaded   = api.AdapterLoaded
	AdapterUnloaded = api.AdapterUnloaded

	AnyToken       = api.AnyToken
	PromptTokens   = api.PromptTokens
	NoControlToken = api.NoControlToken
)

var (
	ErrUnknownModel    = api.ErrUnknownModel
	ErrUnknownAdapter  = api.ErrUnknownAdapter
	ErrQueueFull       = api.ErrQueueFull
	ErrTooLong         = api.ErrTooLong
	ErrNoMemory        = api.ErrNoMemory
	ErrClosed          = api.ErrClosed
	ErrGrammar         = api.ErrGrammar
	ErrGrammarBudget   = api.ErrGrammarBudget
	ErrNoEmbeddings    = api.ErrNoEmbeddings
	ErrPromptOverLimit = api.ErrPromptOverLimit
	ErrRestarting      = api.ErrRestarting
	ErrAdapterBusy     = api.ErrAdapterBusy
	ErrTokenOutOfRange = api.ErrTokenOutOfRange
	ErrControlToken    = api.ErrControlToken
	ErrConfig          = api.ErrConfig
)

// NewStream is api.NewStream.
func NewStream() *Stream { return api.NewStream() }

// ChoiceSeed is api.ChoiceSeed.
func ChoiceSeed(seed uint64, i int) uint64 { return api.ChoiceSeed(seed, i) }

// ReportDevices is api.ReportDevices.
func ReportDevices(ctx context.Context, budgets map[string]int64, store lease.Store, now time.Time, proc string) ([]DeviceStatus, error) {
	return api.ReportDevices(ctx, budgets, store, now, proc)
}

// Devices reports every device of the Block's lease budgets with its live leases (of
// every process sharing the store) and, for GPUs, a fresh NVML snapshot.
func (b *Block) Devices(ctx context.Context) ([]DeviceStatus, error) {
	return ReportDevices(ctx, b.budgets, b.leases, b.now(), b.proc)
}

// configErrorf is api.ConfigErrorf: a configuration New refuses (ErrConfig).
func configErrorf(format string, a ...any) error { return api.ConfigErrorf(format, a...) }

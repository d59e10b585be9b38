package gateway

import (
	"time"

	"github.com/lmlite/lmlite/money"
	"github.com/lmlite/lmlite/policies"
	"github.com/lmlite/lmlite/tiers"
)

// Config is what the gateway serves: its limits, its models, the TierSet and the
// tenants' resolved policies. It is the gateway's own, not the YAML file's format
// (the gateway does not know configs): cmd/lmlite builds it from the file, and a
// program (or a test) may build it directly. Zero fields take the default written
// beside them.
type Config struct {
	MaxBodyBytes int // larger request bodies answer 413; 0: 1 MiB
	MaxInFlight  int // requests in flight before 503; 0: 1024
	// MaxKeepAlive is the longest a request's lmlite.keep_alive may keep a model
	// loaded; 0: no longer than its idle timeout. MinKeepAlive is the shortest a plan
	// with allow_short_keep_alive may ask; 0: DefaultMinKeepAlive. (keepalive.go)
	MaxKeepAlive time.Duration
	MinKeepAlive time.Duration
	// WriteTimeout is how long a write to a client may make no progress before it
	// fails (Server.Serve's connections): a client that stopped reading then loses its
	// connection, and its stream is cancelled and settled; 0: DefaultWriteTimeout.
	WriteTimeout time.Duration
	Models       []Model
	Adapters     []Adapter // LoRA adapters over embedded models, named as a request's model (adapters.go)
	Tiers        tiers.Set
	Book         *policies.Book // the tenants' policies; nil: no tenants
}

// Model is one servable model as the gateway sees it.
type Model struct {
	ID          string
	MaxModelLen int // prompt + output tokens; 0: the engine's (embedded) or unchecked (upstream)
	Slots       int // requests it serves at once (for latency prediction); 0: 1
	MaxQueue    int // requests in flight at which the router counts it overloaded; 0: no limit
	Price       money.Price
	Upstream    *Upstream // nil: the embedded engine serves it
	OwnedBy     string    // the owned_by of /v1/models; "": "lmlite"
	// IdleTimeout is the engine's idle timeout for it (configs: idle_timeout); 0:
	// engine.DefaultIdleTimeout; < 0: never unloaded for idleness.
	IdleTimeout time.Duration
}

// DefaultMinKeepAlive is Config.MinKeepAlive's default.
const DefaultMinKeepAlive = 30 * time.Second

// Upstream is an OpenAI-compatible server that serves a model.
type Upstream struct {
	BaseURL string        // e.g. "http://127.0.0.1:8081/v1"
	Model   string        // the model's name there
	APIKey  string        // sent as "Bearer KEY"; "": none
	Timeout time.Duration // per request; 0: none
}

// Package tenancy authenticates API keys and admits, limits and accounts for each
// tenant's requests.
//
// # Keys
//
// An API key looks like lml_<id>_<secret>. The id names the key (it is not secret and
// shows in listings and the ledger); only a SHA-256 hash of the secret is stored, and
// Authenticate compares hashes in constant time. A key is shown once, when CreateKey
// makes it, and can be revoked. Secrets carry 160 random bits, so a fast hash is safe
// (there is nothing to brute-force, unlike a password).
//
// # Admission and accounting
//
// For each request the gateway calls, in order:
//
//	tk, err := t.Admit(&quota, now, 0)            // concurrency, requests/s, before any
//	                                              // expensive work (the body not decoded)
//	err = tk.CheckTokens(now, promptEstimate)     // tokens/min, once the body is; takes nothing
//	room := tk.Remaining(now)                     // money left (for tier selection)
//	err = tk.Reserve(now, worstCaseCost)          // the chosen model's worst case
//	tk.Release()                                  // only if the engine refused: try another,
//	err = tk.Reserve(now, worstCaseCost)          // reserving on the admitted ticket
//	... run the request ...
//	err = tk.Settle(entry)                        // actual cost, ledger, release
//
// Admit(&quota, now, promptEstimate) does both checks at once, for a caller that has
// the estimate before admission. AdmitReserve is Admit and Reserve in one step, all or nothing (one round trip with
// Redis), for a caller that knows the worst case before admission; a request refused
// before its admission is ledgered through NotAdmitted (coalesced: RecordRefusal).
//
// A Quota is plain data the caller copies from the tenant's policy, so tenancy knows
// nothing of plans or tiers; money is package money's. The store is never read while a
// tenant's lock is held.
//
// The quotas and budgets are behind the Shared interface (shared.go), whose three
// implementations sit side by side, one file each: localQuotas (quotaslocal.go, this
// process's, in memory: the default), RedisShared (redis.go: one Redis for every
// process, a round trip per request) and LeaseShared (leaseshared.go: leases from
// Redis). A Ticket is the same for all three: it names its reservation by its id;
// in-process it also holds the tenant's state and counts its own reservation and slot
// there (Ticket.local), so a request keeps nothing per ticket in a map and takes the
// tenant's lock once in each of Admit, Reserve and Settle, the budget windows' check
// included. TestQuotas* (quotas_test.go) run the same tests against the three. In-process,
// requests/s and tokens/min are golang.org/x/time/rate token buckets; tokens/min is
// charged after the fact with the tokens a request really used, and a request is only
// admitted while the bucket holds at least its prompt's tokens. Budgets (per UTC day
// and per UTC month) use reserve→settle: Reserve succeeds only if settled spend plus
// outstanding reservations plus this request's worst case stays under every ceiling,
// and Settle replaces the reservation by the actual cost (never more than reserved),
// so concurrent requests can never overrun a ceiling. Every decision takes an explicit
// now; the decisions themselves (account.fits, ...) are plain functions of state.
//
// # Several processes
//
// Tenancy.UseShared replaces the in-process quotas by another Shared: RedisShared
// (redis.go) keeps them in one Redis for every process, with the same reserve→settle
// contract, idempotent per ticket id; money fails closed (ErrUnavailable) when Redis
// does not answer, rates fall back to this process's share. API keys are behind the
// Keys interface: boltKeys (keysbolt.go, the store's keys bucket) or, with
// Store.ShareKeys, RedisKeys (rediskeys.go); TestKeysBoltAndRedis runs against both. Each process still ledgers what it settled in its
// own Store; a batch line run twice at once is charged by the first settlement to
// reach Redis, and the other's entry is a rerun at 0 (Ticket.Rerun), so the ledgers
// sum to Redis's spend. docs/REDIS.md has the keys and the failure policy.
//
// # Leases
//
// LeaseShared (leaseshared.go) wraps a RedisShared so that a tenant's requests make no
// round trip to Redis while a lease covers them. Per tenant, the process holds a lease:
// money already reserved in Redis against the day and month ceilings (counted with
// every reservation in the tenant's held money), concurrency slots already counted,
// and request tokens already taken from the requests/s GCRA (beyond half its burst,
// which stays for the per-request path). A request reserves its
// worst case from the lease and settles against it in memory; what it settled is
// reported to Redis in batches with the next refresh (once per refresh seq). A request
// the lease does not cover takes RedisShared's per-request path (exact), on an idle
// slot of the lease and a request token it holds if there are (the lease's slots and
// tokens are quantities apart from its money, which near the ceiling it holds none
// of); refused there while the lease's refresh is under way, it waits for the
// refresh, until a quarter period after its own now (on LeaseOptions.Now's clock), and
// tries the lease again. `lmlite serve` uses leases unless the config
// says `redis: {leases: false}`.
//
// How much to lease and when is planLease (lease.go), a pure function of the lease,
// the demand seen since the last refresh and an explicit now: a lease covers a target
// period (1 s) of recent demand, is refilled ahead of need at a low-water mark, gives
// back at most half its free part per period when demand falls or stops (a shrink whose
// refresh fails as Redis dies stays through the outage, so the lease keeps at least half
// to serve from), all of it when idle and others may be short, and near the ceiling (what is left under a few
// requests' worst case) keeps only what is in flight, so requests go one by one. One
// goroutine per LeaseShared, the refresher, sends the refreshes (lua/lease.lua: a grant
// never takes more than half of what is left beyond a reserve kept for the per-request
// path, so the sum of the leases never exceeds what is left); a request takes the
// book's lock for a few arithmetic steps and never waits for a round trip.
//
// The bounds: spend never exceeds a ceiling (money is only spent from money counted
// in Redis). A process that dies holding leases strands them, never overspends: a lease
// never expires by itself; every ledger entry settled from one names it (Entry.Lease),
// and when the ledger is reconciled (LeaseShared.Reconcile at the process's restart on
// the same store, or ReconcileLeases with its ledger for one that never returns) each
// window's spend is raised to what the ledger settled and the rest is given back
// (lua/reconcile.lua). Stranded money is at most one lease per tenant per dead process.
// The same reconciliation gives back the per-request tickets the ledger's earlier runs
// left in Redis without a hold in the ledger (killed between the reservation and the
// hold: ids begin with TicketPrefix of the ledger, lua/release.lua); the held ones
// SettleInterrupted charges.
// Close reports everything and gives every lease back. docs/REDIS.md has the keys.
//
// The grant rules are the leaseBank interface, in memory (memBank) and in Redis
// (redisBank) side by side; the same tests run against both.
//
// # Ledger
//
// Settle writes the request's usage (tokens, cost, latency, status, request id) to the
// ledger in the Store. The request id is always the server's; a client's X-Request-Id
// is kept apart (Entry.ClientRequestID) and never matched. A batch line's ticket
// (AdmitBatchLine) marks its entry with the line (Entry.Line), which is how a restart
// finds the lines already charged (LoadChargedLines, LineCharged): by that field and
// the tenant, never by a string a client chose. Entries of older versions carry no
// Line and are never taken for a line's charge (a line interrupted under such a
// version is charged again when it runs, never run for free).
//
// A request is held as it starts running (Ticket.Hold): its reservation, logged like
// an entry (a group commit shared with concurrent writers, fsynced with SyncFsync as
// every group is, done in the background: the request does not wait for it), which
// its settlement closes (Entry.Hold). A hold still open when the store is opened belongs to a process that
// died mid-request (Store.Interrupted); SettleInterrupted charges it its reservation,
// the worst case, since no progress was recorded (and, with Redis, settles its ticket
// there too).
//
// The ledger lives in the Store: an embedded bbolt database under the data directory
// holding the entries and per-tenant spend totals per day and month (which Admit
// reloads after a restart), and beside it a write-ahead log, package ledger's Log
// (group commit, segments, the background apply, replay), of which the Store is the
// Owner (ledger.go: the groups, batches and how a batch is applied). Writes are
// grouped without a hand-off: Settle encodes its entry in its own goroutine and
// appends it to the log's current group (where it gets its seq); whoever then holds
// the log's write lock writes the whole group as one record, and entries that arrive
// meanwhile go out together in the next record (group commit). Settle returns only
// when its group's record is written, so that a response is never completed before
// its usage is safe. With SyncFsync each record is fsynced (one fsync per group, not
// per request; it survives power loss); with SyncProcess it is written to the OS only
// (it survives kill -9 of the process, not a power cut) and costs one write(2), with
// no goroutine switch when uncontended. Every 200ms (or 4096 entries) the log moves
// the writers to a new segment, applies the entries of the old ones to the database
// in one fsynced transaction and deletes them, so writers never wait for the
// database; Open replays the segments left by a killed process, skipping what the
// database already holds (entries carry increasing sequence numbers). Package
// ledger's doc says why it is a log of its own and not bbolt's DB.Batch.
//
// A request refused before its admission (a rate, concurrency or budget quota, a bad
// request) is ledgered too, through NotAdmitted, as an entry marked NotAdmitted (cost
// 0): the ledger is the one feed of the usage rollups, refusals included. Such
// refusals are coalesced (RecordRefusal, refusals.go), since a tenant may send them at
// any rate: counted in memory per tenant, key, model, adapter, tier, reason, status
// and minute, and written as one entry per key (Entry.Count) with the next group
// commit, or a flush at least every second, and at Close; the refusal never waits for
// a write. The followed rollups count it at once; a crash loses at most the counts
// since the last flush (telemetry, no money).
//
// The same transaction adds the entries to the usage rollups kept in the database
// (usage.PutBolt), so they always hold exactly the ledger's entries; LoadRollups
// reads them at start, FollowRollups keeps in-memory rollups counting each entry as
// its group is written, and UsageSince lets usage.Redis follow the ledger by seq.
//
// bbolt (go.etcd.io/bbolt) is the embedded store: a well-kept single-file B+tree with
// ACID transactions and a file lock, so a second process cannot open a store in use.
package tenancy

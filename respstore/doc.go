// Package respstore keeps the stored responses of OpenAI's Responses API
// (/v1/responses with store: true, the default): each tenant's responses, their
// input items, and what a request naming one as its previous_response_id continues.
// The HTTP API is the gateway's Responses codec; this package only stores.
//
// # What is stored
//
// A Record is one response: its tenant and id ("resp_…", NewID), its created time
// and expiry, its model, the Response JSON as the API returned it (bytes, kept as
// they were), the request's own input items and the response's output items (each
// an Item: its id and its JSON, in order), and the previous_response_id it
// continued. A record does not copy the conversation before it: Conversation walks
// the chain of previous ids and returns, oldest response first, each one's input
// items then its output items, which is what the continuing request starts from
// (before its own input; instructions are not carried over, as OpenAI's are not).
// The walk is bounded: past Options.MaxDepth responses (1000) or
// Options.MaxConversationBytes of items' JSON (32 MiB) it is a ConversationError
// (ErrConversationTooLong), so a long or cyclic chain costs a bounded amount of
// work. A chain with a missing or expired response in it is ErrNotFound.
//
// # Tenants, expiry, limits
//
// Every response belongs to one tenant and is keyed by tenant and id: Get, Delete,
// InputItems and Conversation of another tenant's id, of a missing one, of a
// deleted one and of an expired one answer the same ErrNotFound (the gateway's 404).
// A response expires at its Record.Expires, by default Options.Retention (30 days)
// after it was created. Every read takes an explicit now and treats a response
// expired at now as gone; Sweep(now) removes the expired ones (the server runs it
// periodically), and so does a Put of the tenant's, first, for that tenant;
// SweepTenant(tenant, now) sweeps one tenant's (it writes only when one has expired).
// Usage reports a tenant's stored responses (count and bytes, Record.Size; expired
// ones until a sweep removes them) for the usage API and for admission
// (Limits.Full: one more response would pass a limit); Options.Limits (or LimitsOf,
// per tenant) caps them, and a Put past a cap is a LimitError (ErrLimit) naming it,
// which the gateway answers as it answers the other quotas; PutWithin takes the
// limits per call (the tenant's plan's). A Put is atomic with its check (in one bbolt
// transaction, one Redis script), so concurrent Puts never pass a limit. A Put of an
// id the tenant already has replaces it (counted once).
//
// InputItems is one page of a response's input items as OpenAI's list endpoints
// page: Page.After (an item id), Page.Limit (1–100, default 20), Page.Order (asc or
// desc, default desc); bad paging is ErrInvalid (a 400).
//
// # Two stores
//
// Bolt keeps the responses of one process in a bbolt file in the data directory
// (responses.db) and a journal beside it (responses.db-journal). A Put returns once
// it is durable: Puts are group-committed by one goroutine, the writer. It takes
// the Puts waiting when it is free and checks each one's limits against the usage
// the Puts before it left (what bbolt holds, plus an overlay of the acknowledged
// Puts bbolt does not hold yet, plus its group's), so the limits stay exact; it
// writes the ones stored as one journal record, fdatasyncs it (one sync for the
// group), and only then answers them. A second goroutine, the applier, commits the
// acknowledged Puts to bbolt (its own two fsyncs, as batch.Store's) in one
// transaction every 100 ms, when no Put came for 25 ms, and when the writer needs it
// (the journal's 4 MiB pass is full; before a Delete, a sweep or Close). The writer
// goes on journaling meanwhile: a Put never waits for a bbolt commit under way
// (before, one goroutine did both, and each commit, 7.7 ms on the Xeon, held every
// Put back). Until bbolt commits them, readers see the acknowledged Puts in the
// overlay. A Put of a tenant one of whose responses has expired by the Put's time
// waits for bbolt to hold every acknowledged Put and sweeps them first, as a Put
// always did (rare: the server sweeps hourly, and admission sweeps a full tenant).
// With Options.ProcessSync (the server's ledger: {sync: process}) a group's record
// is written to the OS and not fdatasynced: the Puts survive the process being
// killed, and a power cut loses at most what bbolt had not committed (about 100 ms).
// At open, the journal's records newer than the last one bbolt committed (its seq
// is kept in the same bbolt transaction) are applied again, so a response survives
// a crash (kill -9 or power loss) once Put returned; a journal beside a bbolt file
// made again (the old one deleted) is emptied, not applied.
//
// Why a journal: a lone Put waited for its own bbolt commit, two fsyncs and the
// pages of a B+tree (on the Zen3 bench machine about 1.2 ms, as long as a whole
// 1-token chat request, so stored responses ran at 0.54x chat's req/s at one
// connection). One fdatasync of a record is the least a durable answer can wait
// for; written over the journal's earlier pass (the file keeps its size), it syncs
// no size or block allocation. Two other ways were weighed and not taken: writing
// the request's input at admission, to overlap the write with generation, still
// leaves the output (the response itself) to be synced after generation, one sync on
// the answer's path as now, and leaves half-written responses to clean up; holding
// only the final event of a stream for the write is what the Responses codec
// already does (the deltas go out as they come; the store happens before
// response.completed), and does nothing for answers that are not streamed. So at
// one connection a stored response still costs one fdatasync more than chat (unless
// ProcessSync, which waits for no sync, as the ledger's sync: process).
//
// In ledger mode (OpenBoltLedger; ledger.go; what lmlite serve opens, with either
// of the ledger's sync modes) there is no
// journal write: a Put is a side record of the usage ledger's write (package ledger,
// ledger.Side), and the gateway hands it to the write of the request's own ledger
// entry (PutCarried; tenancy.Ticket.SettleWith), so a stored request waits for one
// sync, not two, and a settlement whose write fails stores nothing. The owner
// goroutine decides each Put against the tenant's published usage plus the most its
// held Puts could add, in one critical section; publishing, failing and applying
// only lower that, so concurrent Puts never pass a limit (TestLedgerTraces runs
// every interleaving of a few). The ledger deletes a segment only once bbolt holds
// its side records, and replays those a killed process left, newer than the last
// seq bbolt holds; bbolt commits when the ledger's applies ask for that
// (ApplySides, every 200 ms), so one commit's fixed cost is shared by their Puts.
// A new bbolt file has 16 KiB pages (pageSize; one made before keeps its 4 KiB
// ones): bbolt writes a commit's pages one write(2) each, and larger pages make a
// quarter as many writes of the same responses.
//
// Redis keeps them in Redis (when the configuration has a redis: block), so any
// process reads, deletes and continues any response: the tenant is in every key,
// each change of several keys is one Lua script, a record's key expires with it,
// and Conversation walks a whole chain in one round trip (see Redis for the keys). Both behave the same: one table of tests
// (store_test.go) runs against each, the Redis one on a real redis-server.
//
// # Example
//
//	s, err := respstore.OpenBolt(filepath.Join(dataDir, "responses.db"), respstore.Options{})
//	…
//	// a request continuing resp_1:
//	history, err := s.Conversation(ctx, tenant, "resp_1", now) // ErrNotFound → 404
//	// … run it on history + the request's input, then store it:
//	err = s.Put(ctx, respstore.Record{Tenant: tenant, ID: respstore.NewID("resp_"), Created: now,
//		Model: model, Previous: "resp_1", Response: body, Input: input, Output: output})
//
// The caller's duties: give each item an id (its JSON's id) unique in its list;
// pass the time a response was made as Created (Put sweeps the tenant's responses
// expired by then); run Sweep now and then; map ErrNotFound to 404, ErrInvalid to
// 400, a LimitError and a ConversationError to the answers it chose for them.
package respstore

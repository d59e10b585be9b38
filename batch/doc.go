// Package batch runs budget-capped batch jobs (OpenAI's Batch API): the files, the
// jobs, their lifecycle and their persistence. The HTTP API is the gateway's
// (gateway/batches.go); running one line is the gateway's too, through the
// consumer-side LineRunner interface, and checking a line against the tenant's plan
// through Checker.
//
// # Files
//
// Store keeps each file as a file under dir/files (up to MaxFileBytes and
// MaxFileLines; PutFile streams it to disk and stops reading once a limit is passed)
// and its metadata, the jobs and every line's result in an embedded
// bbolt database (dir/batch.db). Every file and job belongs to one tenant and is
// keyed by tenant and id, so another tenant's id is ErrNotFound by the same single
// lookup as a missing one. Ids are random (crypto/rand): they say nothing of when
// they were made. PutFileWith counts an upload against its tenant's FileLimits as its
// bytes arrive (QuotaError); files carry an expiry (ExpiresAt; DefaultFileExpiry for
// a job's output and error files), and Store.Sweep, run by the Manager every
// Options.SweepEvery, deletes the expired ones (an input file once its job ended).
// OpenStore removes what interrupted uploads left (*.tmp) and moves a store written
// before files and jobs were keyed by tenant to the new keys, ids unchanged.
//
// # Lifecycle
//
// Validate (ValidateTo as a stream) checks an input file with line numbers (bad JSON, missing or duplicate
// custom_id, a url other than the batch's endpoint, what the Checker refuses: a model
// or tier the plan forbids) and prices each line's worst case. Decide is the rest of
// the lifecycle as a pure function of the job's View (status, the pending lines'
// worst cases, running lines, the cap, spend and reservations, the tenant's pause)
// and an explicit now (testdata/decide holds its traces):
//
//	validating → in_progress → finalizing → completed
//	validating → failed
//	in_progress → cancelling → cancelled          (unrun lines: batch_cancelled)
//	in_progress → expired after the window        (unrun lines: batch_expired)
//	in_progress → cancelled when the cap is met   (errors.data max_cost_reached; unrun lines too)
//
// The cap: each line reserves its worst case before it runs and settles its actual
// cost (never above the reservation, which the LineRunner gets as MaxCost); when the
// next line's worst case no longer fits beside the spend and the running lines'
// reservations, no line starts, and once the running ones settled and it still does
// not fit the job stops. So spend never exceeds the cap, at any concurrency. When the
// tenant's own budget is spent (the LineRunner answers RefusedBudget) the line goes
// back to the queue and the job stays in_progress with a paused reason until the
// budget window resets.
//
// # Running and durability
//
// Manager owns one goroutine per unfinished job (its driver) that applies Decide's
// decisions and starts up to Options.Concurrency lines at once, in RunOrder. A job's
// validation writes its plan to the store (plan.go: each line's place in the input
// file, its custom_id and worst case, the run order), and the driver reads the plan a
// few lines at a time and each line's body from the input file (held open) when the
// line starts: a job, running or paused, holds at most a few of its lines in memory,
// whatever its size; a resumed job reads its plan rather than validating again.
// Create refuses a job past its tenant's Options.MaxUnfinishedOf (TooManyError)
// before anything of it is read: counting this process's jobs, or with
// Options.Unfinished (tenancy.RedisShared) every live process's. A
// started line goes through a Queue to whatever runs it, and its Outcome comes back
// to the driver, the only one that reserves and settles against the cap. InProcess
// runs the lines on this process (at most Options.MaxRunning at once); RedisQueue
// puts them on Redis Streams with a consumer group, so that every process sharing
// the Redis runs lines of every job; with a LineRunner that is a Placer, a line
// naming a model goes on that model's stream, read only by the processes serving
// it. A line whose worker died is claimed by another reading its stream
// after its lease (XAUTOCLAIM) and dead-lettered (CodeDeadLetter, in the error file)
// after MaxDeliveries; a restarted driver finds its lines still in flight
// (Queue.InFlight). The driver drops an outcome of a line it has already committed.
//
// RunOrder puts lines sharing a leading system message together, so the prefix cache
// serves the shared prompt. A finished line's result and its cost are committed in one bbolt transaction together with the job's spend and counts,
// and a line already committed is skipped and charged nothing (settlement is
// idempotent per job and line). Lines finished together are committed together. The
// output and error files are rebuilt from the committed results when the job ends
// (again if the process died while writing them). After kill -9, Start resumes every
// unfinished job: lines without a committed result run again, marked Retry, with the
// same request id (job id and line index) so the LineRunner can recognise a line
// whose charge was logged before the crash.
//
// # Lines that kill the process
//
// A request that crashes the process (a fatal error no recover catches) would crash
// it again at every restart, as its job resumes. So the driver marks each line
// started, durably, before it runs (the mark names the run, a random id per Manager,
// and counts the runs that started the line), a commit removes the mark, and a clean
// Close takes back the marks of the lines it stopped. At a resume, a mark's count is
// the runs that died while the line was started. Started in Options.CrashLimit (2)
// such runs, the line is failed with CodeCrashed (line_crashed_server, in the error
// file) and not run again; started in fewer, it is on probation: it runs alone, no
// other line of any job of the Manager beside it, so that a second death is its own
// and not its neighbours'. The marks are kept by the store beside the plan, keyed by
// line index: at a resume the marked lines neither committed nor in flight are read
// from the plan by index, and those on probation go first in the driver's window of
// pending lines (as plan entries, their bodies read when they start: no more lines
// are held than were running when the process died). (Lines a RedisQueue runs on
// other processes are counted by the driver that submits them; a worker's deaths are
// MaxDeliveries'.)
package batch

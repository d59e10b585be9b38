package batch

import (
	"time"

	"github.com/lmlite/lmlite/money"
)

// Status is a job's status, as OpenAI names them.
type Status string

const (
	Validating Status = "validating"
	Failed     Status = "failed"
	InProgress Status = "in_progress"
	Finalizing Status = "finalizing"
	Completed  Status = "completed"
	Expired    Status = "expired"
	Cancelling Status = "cancelling"
	Cancelled  Status = "cancelled"
)

// Terminal reports whether the status is final.
func (s Status) Terminal() bool {
	return s == Failed || s == Completed || s == Expired || s == Cancelled
}

// Error codes of the lines a job did not run, and of the job's errors.
const (
	CodeMaxCost   = "max_cost_reached"
	CodeExpired   = "batch_expired"
	CodeCancelled = "batch_cancelled"
)

// View is what the lifecycle decision looks at: the job's state, its lines' states,
// the cap and the tenant's budget state. It is plain data.
type View struct {
	Status          Status
	CancelRequested bool          // POST /cancel was called
	ExpiresAt       time.Time     // the end of the completion window
	Cap             money.Money   // 0: no cap
	Spent           money.Money   // settled cost of the committed lines
	Reserved        money.Money   // worst cases of the running lines
	Pending         []money.Money // worst cases of the lines not started, in run order (a prefix suffices: at most Concurrency)
	PendingCount    int           // all the lines not started
	Running         int
	Concurrency     int       // lines at once; 0: 1
	PausedUntil     time.Time // the tenant's budget was spent: no line starts before
	RetryAt         time.Time // a line was refused for load: no line starts before
}

// Decision is what to do now.
type Decision struct {
	Status Status // the job's status after this decision (terminal: drain, write the files)
	Start  int    // start this many pending lines (the first ones)
	// Drain is the error code every unrun line gets when the job ends here ("" when
	// the job ends with every line run).
	Drain  string
	Paused string    // lmlite.paused_reason, "" when running
	Wake   time.Time // decide again by then (zero: when a line finishes)
}

// Decide is the job's lifecycle as a pure function of its view and now. Validation
// (validating → in_progress or failed) is decided by Validate; Decide takes over from
// in_progress.
//
//   - cancel requested: cancelling; once no line runs, cancelled (unrun lines: batch_cancelled).
//   - past the window: no line starts; once none runs, expired (unrun lines: batch_expired).
//   - every line done: finalizing, then (after the files are written) completed.
//   - the next line's worst case does not fit the cap: no line starts; once none runs
//     (settlements may free room), cancelled with max_cost_reached.
//   - the tenant's budget is spent (PausedUntil in the future): in_progress, paused.
//   - else start as many lines as the concurrency, the cap and the window allow.
func Decide(v View, now time.Time) Decision {
	switch v.Status {
	case Validating, Failed, Completed, Expired, Cancelled:
		return Decision{Status: v.Status}
	case Finalizing:
		return Decision{Status: Completed}
	}
	if v.CancelRequested || v.Status == Cancelling {
		if v.Running > 0 {
			return Decision{Status: Cancelling}
		}
		return Decision{Status: Cancelled, Drain: drain(v, CodeCancelled)}
	}
	if !v.ExpiresAt.IsZero() && !now.Before(v.ExpiresAt) {
		if v.Running > 0 {
			return Decision{Status: InProgress}
		}
		return Decision{Status: Expired, Drain: drain(v, CodeExpired)}
	}
	if v.PendingCount == 0 {
		if v.Running > 0 {
			return Decision{Status: InProgress}
		}
		return Decision{Status: Finalizing}
	}
	if now.Before(v.PausedUntil) {
		return Decision{Status: InProgress, Paused: "tenant budget exhausted; resumes when the budget window resets", Wake: earliest(v.PausedUntil, v.ExpiresAt)}
	}
	conc := max(v.Concurrency, 1)
	start := 0
	room := v.Cap - v.Spent - v.Reserved
	for start < len(v.Pending) && start < v.PendingCount && v.Running+start < conc {
		w := v.Pending[start]
		if v.Cap > 0 && w > room {
			break
		}
		room -= w
		start++
	}
	if start == 0 && v.Running == 0 && v.Cap > 0 && len(v.Pending) > 0 && v.Pending[0] > v.Cap-v.Spent {
		return Decision{Status: Cancelled, Drain: CodeMaxCost}
	}
	if now.Before(v.RetryAt) {
		return Decision{Status: InProgress, Wake: earliest(v.RetryAt, v.ExpiresAt)}
	}
	return Decision{Status: InProgress, Start: start, Wake: v.ExpiresAt}
}

func drain(v View, code string) string {
	if v.PendingCount == 0 {
		return ""
	}
	return code
}

func earliest(a, b time.Time) time.Time {
	if b.IsZero() || (!a.IsZero() && a.Before(b)) {
		return a
	}
	return b
}

package batch

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/lmlite/lmlite/money"
)

var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// TestDecideTrace replays the job lifecycle traces in testdata/decide: each
// "decide" names the view at an explicit time t (seconds) and holds the decision.
// Money is in nano-dollars. Rewrite after a deliberate change with -rewrite.
//
//	decide t=0 status=in_progress pending=10,10 count=2 running=0 conc=2 cap=25 spent=0 reserved=0 expires=100 paused=0 retry=0 [cancel]
func TestDecideTrace(t *testing.T) {
	datadriven.RunTest(t, "testdata/decide", func(t *testing.T, d *datadriven.TestData) string {
		if d.Cmd != "decide" {
			d.Fatalf(t, "unknown command %s", d.Cmd)
		}
		var v View
		var now time.Time
		at := func(s string) time.Time {
			n, err := strconv.Atoi(s)
			if err != nil {
				d.Fatalf(t, "%v", err)
			}
			if n == 0 {
				return time.Time{}
			}
			return base.Add(time.Duration(n) * time.Second)
		}
		num := func(s string) int64 {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				d.Fatalf(t, "%v", err)
			}
			return n
		}
		for _, a := range d.CmdArgs {
			val := ""
			if len(a.Vals) > 0 {
				val = a.Vals[0]
			}
			switch a.Key {
			case "t":
				now = base.Add(time.Duration(num(val)) * time.Second)
			case "status":
				v.Status = Status(val)
			case "pending":
				for _, w := range a.Vals {
					for _, x := range strings.Split(w, ",") {
						if x != "" {
							v.Pending = append(v.Pending, money.Money(num(x)))
						}
					}
				}
			case "count":
				v.PendingCount = int(num(val))
			case "running":
				v.Running = int(num(val))
			case "conc":
				v.Concurrency = int(num(val))
			case "cap":
				v.Cap = money.Money(num(val))
			case "spent":
				v.Spent = money.Money(num(val))
			case "reserved":
				v.Reserved = money.Money(num(val))
			case "expires":
				v.ExpiresAt = at(val)
			case "paused":
				v.PausedUntil = at(val)
			case "retry":
				v.RetryAt = at(val)
			case "cancel":
				v.CancelRequested = true
			default:
				d.Fatalf(t, "unknown argument %s", a.Key)
			}
		}
		dec := Decide(v, now)
		var b strings.Builder
		fmt.Fprintf(&b, "status=%s start=%d", dec.Status, dec.Start)
		if dec.Drain != "" {
			fmt.Fprintf(&b, " drain=%s", dec.Drain)
		}
		if dec.Paused != "" {
			b.WriteString(" paused")
		}
		if !dec.Wake.IsZero() {
			fmt.Fprintf(&b, " wake=%d", int(dec.Wake.Sub(base)/time.Second))
		}
		return b.String() + "\n"
	})
}

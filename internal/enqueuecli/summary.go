package enqueuecli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// Summary is what --json prints on stdout when the run ends.
type Summary struct {
	// Tasks counts the tasks handled: every non-blank line, or the one
	// task of --payload. Lines after a stop are not counted.
	Tasks int `json:"tasks"`
	// Accepted were enqueued to run now (or at their own at/in).
	Accepted int `json:"accepted"`
	// Deferred were rejected by admission for now and enqueued to run at
	// their Retry-After (policies with on_reject: defer).
	Deferred int `json:"deferred"`
	// Enqueued is Accepted + Deferred.
	Enqueued int `json:"enqueued"`
	// Collapsed were collapsed into a task with their collapse key that
	// still waited (a downstream with collapse): nothing new was enqueued;
	// under keep_last the waiting task took their payload. They count as
	// done (exit 0), not in Enqueued.
	Collapsed int `json:"collapsed"`
	// Rejected were refused by admission and not enqueued.
	Rejected int `json:"rejected"`
	// Late were refused because their predicted start was past their
	// deadline (on_late: reject); not enqueued.
	Late int `json:"late"`
	// Invalid were bad input, each reported on stderr; not enqueued.
	Invalid int `json:"invalid"`
	// Duplicates had a unique key that an existing task holds.
	Duplicates int `json:"duplicates"`
	// Failed could not be enqueued for another reason (Redis errors).
	Failed int `json:"failed"`
	// Uncertain were sent to Redis and failed without an answer that says
	// they were refused (a network error, a timeout): each may or may not
	// be stored. UncertainLines lists their lines.
	Uncertain      int   `json:"uncertain"`
	UncertainLines []int `json:"uncertain_lines,omitempty"`
	// FailedOpen were enqueued without an admission decision: the
	// limiters' Redis calls failed and the policy is fail_open.
	FailedOpen int `json:"failed_open"`
	// FirstRetryAfter is the Retry-After, in seconds, of the first
	// rejection; null when nothing was rejected. FirstRetryAt is that
	// rejection's time plus it.
	FirstRetryAfter *float64   `json:"first_retry_after"`
	FirstRetryAt    *time.Time `json:"first_retry_at,omitempty"`
	// MaxRetryAfter is the latest retry time of any rejection, in seconds
	// from the end of the run: waiting that long, every rejected task
	// would have been admitted on its own.
	MaxRetryAfter *float64 `json:"max_retry_after,omitempty"`
	// StoppedAtLine is, when the run stopped early (Redis unreachable, or
	// interrupted), the first line not known to be handled: every line
	// before it was (enqueued, collapsed, rejected, invalid or a
	// duplicate), so a run resumed from it misses nothing. 0 when the run
	// finished.
	StoppedAtLine int `json:"stopped_at_line,omitempty"`
	// EnqueuedAfterStop lists the lines after StoppedAtLine that were
	// enqueued all the same (with --concurrency above 1, later lines were
	// in flight): a run resumed from StoppedAtLine enqueues them again
	// unless they carry unique keys.
	EnqueuedAfterStop []int  `json:"enqueued_after_stop,omitempty"`
	Error             string `json:"error,omitempty"`
	Interrupted       bool   `json:"interrupted,omitempty"`
	DryRun            bool   `json:"dry_run,omitempty"`
	// ID and ProcessAt describe the one task of --payload/--payload-file
	// when it was enqueued. When it was collapsed, ID and CollapsedInto are
	// the id of the waiting task it was collapsed into (ProcessAt absent).
	ID            string     `json:"id,omitempty"`
	CollapsedInto string     `json:"collapsed_into,omitempty"`
	ProcessAt     *time.Time `json:"process_at,omitempty"`
	// Priority is the priority the one task waits at (1 to 5).
	Priority int `json:"priority,omitempty"`
	// ExpectedStart estimates when the one task will be released.
	ExpectedStart  *time.Time `json:"expected_start,omitempty"`
	ElapsedSeconds float64    `json:"elapsed_seconds"`
	ExitCode       int        `json:"exit_code"`
}

func writeJSON(w io.Writer, s Summary) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(s)
}

func humanSummary(s Summary) string {
	var b strings.Builder
	verb := plural(s.Tasks, "task", "tasks")
	if s.DryRun {
		verb += " checked (dry run, nothing enqueued)"
	}
	fmt.Fprintf(&b, "%d %s in %s: %d accepted, %d deferred, %d rejected", s.Tasks, verb,
		time.Duration(s.ElapsedSeconds*float64(time.Second)).Round(time.Millisecond), s.Accepted, s.Deferred, s.Rejected)
	if s.FirstRetryAfter != nil {
		fmt.Fprintf(&b, " (first Retry-After %s)", secs(*s.FirstRetryAfter))
	}
	if s.Collapsed > 0 {
		fmt.Fprintf(&b, ", %d collapsed into %s", s.Collapsed, plural(s.Collapsed, "a waiting task", "waiting tasks"))
	}
	for _, c := range []struct {
		n    int
		what string
	}{{s.Late, "refused as late (deadline before the predicted start)"}, {s.Invalid, "invalid"}, {s.Duplicates, "duplicate"}, {s.Failed, "failed"}, {s.Uncertain, "uncertain (sent, outcome unknown)"},
		{s.FailedOpen, "admitted without a decision (fail_open)"}} {
		if c.n > 0 {
			fmt.Fprintf(&b, ", %d %s", c.n, c.what)
		}
	}
	switch {
	case s.StoppedAtLine > 0 && s.Error != "":
		fmt.Fprintf(&b, "; stopped at line %d: %s", s.StoppedAtLine, s.Error)
	case s.StoppedAtLine > 0:
		fmt.Fprintf(&b, "; stopped at line %d", s.StoppedAtLine)
	case s.Error != "":
		fmt.Fprintf(&b, "; %s", s.Error)
	}
	if s.Interrupted {
		b.WriteString("; interrupted")
	}
	return b.String()
}

func secs(v float64) string {
	return time.Duration(v * float64(time.Second)).Round(time.Millisecond).String()
}

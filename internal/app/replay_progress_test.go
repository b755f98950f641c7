package app

import (
	"bytes"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/replay"
)

// On a terminal the progress line is drawn once a second at most, over
// itself, and erased at the end; elsewhere it is a line every 10 s and
// one at the end. The percentage and the time left come from the bytes
// read of a log of known size.
func TestReplayProgressLine(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)
	logTime := time.Date(2026, 1, 2, 15, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		tty  bool
		want []string // stderr after each step
	}{
		{true, []string{"",
			"\r[=====>              ]  25%  25000 lines  20k lines/s  log at 2026-01-02T15:00:00Z  4s left\x1b[K",
			"\r[==========>         ]  50%  50000 lines  5.0k lines/s  log at 2026-01-02T15:00:00Z  10s left\x1b[K",
			"\r\x1b[K"}},
		{false, []string{"", "", "replay: [==========>         ]  50%  50000 lines  5.0k lines/s  log at 2026-01-02T15:00:00Z  10s left\n",
			"replay: [====================] 100%  100000 lines  9.1k lines/s  log at 2026-01-02T15:00:00Z  done in 11s\n"}},
	} {
		var w bytes.Buffer
		now := t0
		p := newReplayProgress(&w, c.tty, 4_000_000, func() time.Time { return now })
		for i, st := range []struct {
			at   time.Duration
			prog replay.Progress
		}{
			{500 * time.Millisecond, replay.Progress{Lines: 10_000, Bytes: 400_000, LogTime: logTime}},
			{1250 * time.Millisecond, replay.Progress{Lines: 25_000, Bytes: 1_000_000, LogTime: logTime}},
			{10 * time.Second, replay.Progress{Lines: 50_000, Bytes: 2_000_000, LogTime: logTime}},
			{11 * time.Second, replay.Progress{Lines: 100_000, Bytes: 4_000_000, LogTime: logTime, Done: true}},
		} {
			now = t0.Add(st.at)
			w.Reset()
			p.update(st.prog)
			if got := w.String(); got != c.want[i] {
				t.Errorf("terminal %v, step %d (t0+%s):\n got %q\nwant %q", c.tty, i, st.at, got, c.want[i])
			}
		}
	}
}

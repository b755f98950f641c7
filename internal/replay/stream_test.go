package replay_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/replay"
)

// countingReader counts the bytes read from r.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// The log is streamed: the first decision is out after a small part of
// a 20,000-line log has been read, the decisions come in the log's order,
// and what is held in memory at once (the reorder window's arrivals,
// tasks waiting for their slots, decisions waiting for an earlier line's
// or on their way between the stages) is at most a thousand whatever
// the log's length.
func TestReplayStreams(t *testing.T) {
	t.Parallel()
	log := benchLog(20_000)
	in := &countingReader{r: bytes.NewReader(log)}
	readAtFirst, n, lastLine := -1, 0, 0
	rep, err := replay.Run(context.Background(), buildPlan(t, "stream"), in, replay.Options{
		Decisions: func(d replay.Decision) error {
			if readAtFirst < 0 {
				readAtFirst = in.n
			}
			if d.Line != lastLine+1 {
				return fmt.Errorf("decision of line %d after line %d's", d.Line, lastLine)
			}
			lastLine = d.Line
			n++
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if n != 20_000 || rep.Arrivals != 20_000 {
		t.Fatalf("%d decisions, report of %d arrivals; want 20000", n, rep.Arrivals)
	}
	if readAtFirst > len(log)/10 {
		t.Errorf("the first decision came after %d of %d bytes were read; want at most a tenth", readAtFirst, len(log))
	}
	if rep.MaxHeld < 1 || rep.MaxHeld > 1000 {
		t.Errorf("at most %d arrivals and decisions held at once; want 1 to 1000 (10s of 20/s, deferrals, two batches)", rep.MaxHeld)
	}
	t.Logf("first decision after %d of %d bytes; at most %d held", readAtFirst, len(log), rep.MaxHeld)
}

// Lines out of time order within the reorder window are replayed in
// time order and reported in the log's; a line behind one already
// replayed is an error that names both.
func TestReplayReorders(t *testing.T) {
	t.Parallel()
	pl := planOf(t, `
downstreams:
  - name: api
    rate: 10/s
    handler: {type: log}
    admission: {limiters: [{name: one, algorithm: token_bucket, key: global, rate: 1/m, burst: 1}]}
`)
	t0 := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC).Unix()
	ds, _ := run(t, pl, fmt.Sprintf("{\"ts\":%d}\n{\"ts\":%d}\n", t0+5, t0+1), replay.Options{})
	if len(ds) != 2 || ds[0].Line != 1 || ds[0].Outcome != replay.Rejected || ds[1].Line != 2 || ds[1].Outcome != replay.Admitted {
		t.Errorf("got %+v; want line 1 (t0+5s) rejected, line 2 (t0+1s) admitted first, reported in the log's order", ds)
	}
	log := fmt.Sprintf("{\"ts\":%d}\n{\"ts\":%d}\n{\"ts\":%d}\n", t0+10, t0+30, t0+5)
	_, err := replay.Run(context.Background(), pl, strings.NewReader(log), replay.Options{Reorder: 10 * time.Second})
	want := "line 3: ts 2026-01-02T12:00:05Z is before line 1's 2026-01-02T12:00:10Z, which was already replayed"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want an error containing %q", err, want)
	}
}

// Progress is reported every ProgressEvery lines and once at the end.
func TestReplayProgress(t *testing.T) {
	t.Parallel()
	var calls []replay.Progress
	_, rep := run(t, buildPlan(t, "progress"), string(benchLog(1000)), replay.Options{ProgressEvery: 100,
		Progress: func(p replay.Progress) { calls = append(calls, p) }})
	if len(calls) != 11 || calls[0].Lines != 100 || calls[9].Lines != 1000 || calls[9].Done {
		t.Fatalf("%d progress calls: %+v; want 10 of every 100 lines, then the last", len(calls), calls)
	}
	if last := calls[10]; !last.Done || last.Lines != 1000 || last.Decided != rep.Arrivals || last.LogTime.IsZero() || last.Held != 0 {
		t.Errorf("last progress %+v; want done, 1000 lines, all decided, nothing held", last)
	}
}

// The embedded Redis expires keys on the log's clock: a key with a TTL
// of 1.5s outlives a second of log time, however long the replay takes
// on the wall clock, and is gone 2s later.
func TestEmbeddedExpiresOnTheLogClock(t *testing.T) {
	t.Parallel()
	e, err := replay.NewEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	t0 := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)
	e.Advance(t0)
	if err := e.Client().Set(ctx, "k", "v", 1500*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		at   time.Duration
		want int64
	}{{500 * time.Millisecond, 1}, {time.Second, 1}, {1400 * time.Millisecond, 1}, {2 * time.Second, 0}} {
		e.Advance(t0.Add(step.at))
		if got := e.Client().Exists(ctx, "k").Val(); got != step.want {
			t.Errorf("step t0+%s: %d keys, want %d", step.at, got, step.want)
		}
	}
}

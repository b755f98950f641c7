package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// check runs the example and asserts what its README promises: no 429,
// each task within the quota delivered once, the quota never exceeded, and
// the rest waiting for the next UTC day with no attempt used.
func check(t *testing.T, o options) {
	t.Helper()
	if now := time.Now().UTC(); now.Add(time.Minute).Day() != now.Day() {
		t.Skip("too close to 00:00 UTC: the quota would reset during the run")
	}
	var out bytes.Buffer
	rep, err := run(o, &out)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	t.Logf("output:\n%s", out.String())
	if rep.Refused != 0 {
		t.Errorf("the API answered 429 %d times, want 0", rep.Refused)
	}
	if rep.UsedToday != o.Daily {
		t.Errorf("the API counted %d calls today, want its quota, %d, exactly", rep.UsedToday, o.Daily)
	}
	if rep.MostInASec > o.PerSecond {
		t.Errorf("%d calls in one second, want at most %d", rep.MostInASec, o.PerSecond)
	}
	enqueued := map[string]bool{}
	for _, id := range rep.Enqueued {
		enqueued[id] = true
	}
	for id, c := range rep.Delivered {
		if !enqueued[id] || c != 1 {
			t.Errorf("task %q delivered %d times (enqueued: %v), want once", id, c, enqueued[id])
		}
	}
	if len(rep.Delivered) != o.Daily {
		t.Errorf("%d tasks delivered, want %d (the quota)", len(rep.Delivered), o.Daily)
	}
	if w := rep.Waiting; w.Total() != o.Tasks-o.Daily || w.Retry != 0 || w.Archived != 0 || rep.Retried != 0 {
		t.Errorf("queue after the run %+v, %d attempts used; want %d waiting, none to retry or archived, no attempt used",
			w, rep.Retried, o.Tasks-o.Daily)
	}
	if !strings.HasPrefix(rep.HeldBy, "quota ") {
		t.Errorf("the rest held by %q, want the quota", rep.HeldBy)
	}
	midnight := time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	if d := rep.Reset.Sub(midnight); d < -time.Second || d > time.Second {
		t.Errorf("the quota resets at %s, want %s", rep.Reset.UTC(), midnight)
	}
}

// 60 tasks, a quota of 40 a day and 20 a second, shaper at 50/s, on a
// real Redis.
func TestQuotaAPI(t *testing.T) {
	check(t, options{Tasks: 60, Daily: 40, PerSecond: 20, Redis: redistest.URL(t), Prefix: redistest.Prefix(t)})
}

// The same on the embedded Redis that `go run ./examples/quota-api` uses.
func TestQuotaAPIEmbeddedRedis(t *testing.T) {
	check(t, options{Tasks: 40, Daily: 30, PerSecond: 20})
}

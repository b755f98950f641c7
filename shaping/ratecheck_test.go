package shaping_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

func nop(context.Context, *shaping.Task) error { return nil }

// CheckRate is the one rule for every rate a downstream runs at: its
// largest release must fit in MaxInterval at the rate.
func TestCheckRate(t *testing.T) {
	t.Parallel()
	per := func(n int64, d time.Duration) limiters.Limit { return limiters.Limit{Rate: n, Period: d, Burst: n} }
	for i, tt := range []struct {
		ds   shaping.Downstream
		rate limiters.Limit
		want error // nil: accepted
	}{
		{shaping.Downstream{Rate: limiters.PerSecond(1)}, per(1, 24*time.Hour), nil},
		{shaping.Downstream{Rate: limiters.PerSecond(1)}, per(1, 25*time.Hour), shaping.ErrRateTooSlow},
		{shaping.Downstream{Rate: limiters.PerSecond(10), MaxCost: 1}, per(1, 100*time.Hour), shaping.ErrRateTooSlow},
		// the default max cost (what 1s holds at 100/s: 100) at 1/h is 100h
		{shaping.Downstream{Rate: limiters.PerSecond(100)}, per(1, time.Hour), shaping.ErrRateTooSlow},
		{shaping.Downstream{Rate: limiters.PerSecond(100)}, per(5, time.Hour), nil},
		{shaping.Downstream{Rate: limiters.PerSecond(10), MaxCost: 24}, per(1, time.Hour), nil},
		{shaping.Downstream{Rate: limiters.PerSecond(10), MaxCost: 25}, per(1, time.Hour), shaping.ErrRateTooSlow},
		// a batch of 10 rows of cost 3 is a release of 30
		{shaping.Downstream{Rate: limiters.PerSecond(10), MaxCost: 3, Batch: &shaping.Batch{MaxRows: 10}}, per(1, time.Hour), shaping.ErrRateTooSlow},
		{shaping.Downstream{Rate: limiters.PerSecond(10), MaxCost: 2, Batch: &shaping.Batch{MaxRows: 10}}, per(1, time.Hour), nil},
		// under a spread quota of one unit a day the default max cost is 1
		{shaping.Downstream{Rate: limiters.PerSecond(10), Quotas: []shaping.Quota{{Limit: 7, Per: 7 * 24 * time.Hour, Spread: true}}}, per(1, 24*time.Hour), nil},
		{shaping.Downstream{Rate: limiters.PerSecond(10)}, limiters.Limit{Rate: 0, Period: time.Second}, limiters.ErrInvalidLimit},
	} {
		tt.ds.Name = "api"
		err := tt.ds.CheckRate(tt.rate)
		if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
			t.Errorf("step %d: CheckRate(%s) = %v, want %v", i, tt.rate.RateString(), err, tt.want)
		}
	}
	err := shaping.Downstream{Name: "api", Rate: limiters.PerSecond(1)}.CheckRate(per(1, 25*time.Hour))
	var se *shaping.SlowRateError
	if !errors.As(err, &se) || se.Cost != 1 || se.Hold != 25*time.Hour || !strings.Contains(err.Error(), `downstream "api"`) {
		t.Errorf("CheckRate(1/25h) = %v (%+v), want a SlowRateError of cost 1 holding 25h that names the downstream", err, se)
	}
}

// Add refuses a downstream configured to run, at any time, at a rate its
// largest release does not fit: the rate, a scheduled rate, the adaptive
// floor. A spread quota slower than one unit a day is refused the same
// way (its pace is a rate the bucket would refuse).
func TestAddRefusesRatesTheBucketWouldRefuse(t *testing.T) {
	t.Parallel()
	d := shaping.New(redistest.Client(t), shaping.Config{Prefix: redistest.Prefix(t)})
	slow, err := shaping.ParseRateChange("0 20 * * *", "1/48h", time.UTC)
	must(t, err)
	fine, err := shaping.ParseRateChange("0 8 * * *", "1/24h", time.UTC)
	must(t, err)
	for i, c := range []struct {
		ds   shaping.Downstream
		want string // "" accepted
	}{
		{shaping.Downstream{Rate: limiters.Limit{Rate: 1, Period: 25 * time.Hour}}, "rate 1/25h is too slow"},
		{shaping.Downstream{Rate: limiters.PerSecond(1), Schedule: shaping.RateSchedule{fine, slow}}, `schedule "CRON_TZ=UTC 0 20 * * *": rate 1/48h is too slow`},
		{shaping.Downstream{Rate: limiters.PerSecond(1), Adaptive: &shaping.Adaptive{Floor: limiters.Limit{Rate: 1, Period: 25 * time.Hour}, Ceiling: limiters.PerSecond(1)}},
			"adaptive floor: rate 1/25h is too slow"},
		{shaping.Downstream{Rate: limiters.PerSecond(10), Quotas: []shaping.Quota{{Limit: 5, Per: 168 * time.Hour, Spread: true}}}, "spread paces one unit every per/limit (33h36m0s)"},
		{shaping.Downstream{Rate: limiters.PerSecond(10), Quotas: []shaping.Quota{{Limit: 7, Per: 168 * time.Hour, Spread: true}}}, ""},
		{shaping.Downstream{Rate: limiters.PerSecond(10), Quotas: []shaping.Quota{{Limit: 5, Per: 168 * time.Hour}}}, ""},
		{shaping.Downstream{Rate: limiters.PerSecond(1), Schedule: shaping.RateSchedule{fine}}, ""},
	} {
		c.ds.Name, c.ds.Handler = "d"+itoa(i), nop
		err := d.Add(c.ds)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("step %d: Add = %v, want %q", i, err, c.want)
		}
	}
}

// A dispatcher's Control refuses an override its downstream cannot run
// at; an override written by anything else (a Control that knows no
// downstream) is ignored by every dispatcher, logged once, and tasks are
// released at the configured rate instead of archived.
func TestSlowRateOverrideIgnored(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	logs := &syncBuffer{}
	d := shaping.New(rdb, shaping.Config{Prefix: prefix, Logger: slog.New(slog.NewTextHandler(logs, nil)), ControlInterval: 20 * time.Millisecond})
	rec := newRecorder()
	must(t, d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(20), Handler: rec.handle}))
	must(t, d.Start())
	defer d.Shutdown(context.Background())
	ctx := context.Background()

	slow := limiters.Limit{Rate: 1, Period: 25 * time.Hour}
	if err := d.Control().SetRate(ctx, "api", slow); !errors.Is(err, shaping.ErrRateTooSlow) {
		t.Fatalf("dispatcher's Control.SetRate(1/25h) = %v, want ErrRateTooSlow", err)
	}
	if st, _ := d.Control().State(ctx, "api"); !st.Override.IsZero() {
		t.Fatalf("a refused override was written: %v", st.Override)
	}
	must(t, shaping.NewControl(rdb, prefix).SetRate(ctx, "api", slow))
	waitFor(t, 5*time.Second, "the ignored override logged", func() bool { return strings.Contains(logs.String(), "ignoring the rate override") })
	p := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix})
	for i := 0; i < 3; i++ {
		if _, err := p.Enqueue(ctx, queue.Task{Downstream: "api", Payload: []byte(itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, "3 tasks released at the configured rate", func() bool { return rec.count() == 3 })
	if l, _ := d.Rate("api"); l.PerSec() != 20 {
		t.Errorf("rate in force %v, want the configured 20/s", l)
	}
	in := queue.NewInspector(rdb, prefix)
	if b, err := in.Backlog("api"); err != nil || b.Archived != 0 {
		t.Errorf("backlog %+v, %v: want nothing archived", b, err)
	}
	if n := strings.Count(logs.String(), "ignoring the rate override"); n != 1 {
		t.Errorf("the ignored override logged %d times over many control ticks, want once", n)
	}
	// a good override still applies
	must(t, d.Control().SetRate(ctx, "api", limiters.PerSecond(30)))
	waitFor(t, 5*time.Second, "the good override applied", func() bool {
		l, _ := d.Rate("api")
		return l.PerSec() == 30
	})
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

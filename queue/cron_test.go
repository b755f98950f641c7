package queue

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shaper-io/shaper/internal/clocktest"
	"github.com/shaper-io/shaper/internal/cronspec"
	testwait "github.com/shaper-io/shaper/internal/testutil"
)

// runCrons starts one Cron per process on clk, all running jobs, and
// stops them when the test ends.
func runCrons(t *testing.T, b *bundle, clk *clocktest.Fake, procs int, jobs ...CronJob) []*Cron {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var out []*Cron
	for range procs {
		c := NewCron(b.rdb, b.producer(t, ProducerConfig{}), CronConfig{Prefix: b.prefix, Jobs: jobs,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: prometheus.NewRegistry(), Clock: clk})
		out = append(out, c)
		wg.Go(func() { c.Run(ctx) })
	}
	t.Cleanup(func() { cancel(); wg.Wait() }) // before the producers close
	return out
}

// armed waits until n jobs sleep until at on clk: each has fired the tick
// before (or just started) and asks for the next one.
func armed(t *testing.T, clk *clocktest.Fake, at time.Time, n int) {
	t.Helper()
	testwait.WaitFor(t, 5*time.Second, "cron jobs asleep until "+at.Format(time.TimeOnly), func() bool {
		k := 0
		for _, due := range clk.Pending() {
			if due.Equal(at) {
				k++
			}
		}
		return k == n
	})
}

// pendingIDs lists the IDs of ds's pending tasks, sorted.
func pendingIDs(t *testing.T, b *bundle, ds string) []string {
	t.Helper()
	tasks, err := b.in.Asynq().ListPendingTasks(b.in.space.Queue(ds))
	if errors.Is(err, asynq.ErrQueueNotFound) {
		return nil // nothing enqueued yet
	}
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, ti := range tasks {
		ids = append(ids, ti.ID)
	}
	slices.Sort(ids)
	return ids
}

func tickCount(cs []*Cron, job, outcome string) float64 {
	sum := 0.0
	for _, c := range cs {
		sum += testutil.ToFloat64(c.m.CronTicks.WithLabelValues(job, outcome))
	}
	return sum
}

// Three processes run one "@every 10s" job on a fake clock: each of six
// ticks is enqueued exactly once, as task "cron:<job>:<unix tick>", and
// the other two processes count it taken. A minute of ticks, no
// wall-clock minute.
func TestCronTicksOnTheFakeClock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	every, err := cronspec.Parser.Parse("@every 10s")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 11, 30, 12, 0, 5, 0, time.UTC)
	clk := clocktest.New(start)
	crons := runCrons(t, b, clk, 3, CronJob{Name: "tick", Schedule: every, Task: Task{Downstream: "ds", Payload: []byte("x")}})
	tick := time.Date(2026, 11, 30, 12, 0, 10, 0, time.UTC) // epoch-aligned, not start+10s
	armed(t, clk, tick, 3)
	var want []string
	for range 6 {
		clk.AdvanceTo(tick)
		want = append(want, "cron:tick:"+strconv.FormatInt(tick.Unix(), 10))
		tick = tick.Add(10 * time.Second)
		armed(t, clk, tick, 3)
	}
	if got := pendingIDs(t, b, "ds"); !slices.Equal(got, want) {
		t.Errorf("pending tasks %v after six ticks, want one per tick: %v", got, want)
	}
	if n, m := tickCount(crons, "tick", "enqueued"), tickCount(crons, "tick", "taken"); n != 6 || m != 12 {
		t.Errorf("ticks enqueued %v, taken %v across three processes; want 6 and 12", n, m)
	}
}

// A nightly job (a cron expression, read with Schedule.Next in its time
// zone) fires at 02:00 each night of the fake clock and at no other time:
// advancing to 01:59 enqueues nothing, to 02:00 one task.
func TestCronNightlyOnTheFakeClock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Skip("no time zone data:", err)
	}
	nightly, err := cronspec.Parser.Parse("CRON_TZ=Europe/Berlin 0 2 * * *")
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktest.New(time.Date(2026, 11, 30, 10, 0, 0, 0, berlin))
	runCrons(t, b, clk, 1, CronJob{Name: "nightly", Schedule: nightly, Task: Task{Downstream: "db", Payload: []byte("x")}})
	var want []string
	for night := 1; night <= 2; night++ {
		at := time.Date(2026, 11, 30+night, 2, 0, 0, 0, berlin)
		armed(t, clk, at, 1)
		clk.AdvanceTo(at.Add(-time.Minute))
		if got := pendingIDs(t, b, "db"); !slices.Equal(got, want) {
			t.Fatalf("night %d, 01:59: pending %v, want %v (nothing new before 02:00)", night, got, want)
		}
		clk.AdvanceTo(at)
		want = append(want, "cron:nightly:"+strconv.FormatInt(at.Unix(), 10))
		armed(t, clk, at.AddDate(0, 0, 1), 1)
		if got := pendingIDs(t, b, "db"); !slices.Equal(got, want) {
			t.Fatalf("night %d, 02:00: pending %v, want %v", night, got, want)
		}
	}
}

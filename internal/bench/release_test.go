package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/testsink"
)

// Every release-path round at toy sizes on real shaper processes (built
// from cmd/shaper): each row is filled and the section renders.
func TestReleaseRoundsSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/shaper and runs shaper processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	opts := Options{
		Scenarios: []string{ScenarioRelease}, ReleaseProcs: []int{1},
		EconomyRates: []int{20}, EconomyProcs: 2, EconomyDrain: time.Second,
		KeepupRates: []int{20}, KeepupDrain: time.Second,
		IdleLevels: []int{1, 3}, IdleWarmup: 500 * time.Millisecond, IdleWindow: time.Second,
		KillRate: 20, KillProcs: 2, KillBacklog: 60, KillAfter: time.Second, KillLimit: 8 * time.Second,
		Pause:    PauseOptions{Rate: 20, Procs: 2, Backlog: 60, After: 500 * time.Millisecond, Hold: 2500 * time.Millisecond},
		FairRate: 50, FairProcs: 2, FairTasksA: 40, FairTasksBC: 5, FairDelay: 300 * time.Millisecond,
		Priority: PriorityOptions{Rate: 50, Procs: 2, Backlog: 60, Urgent: 5, After: 10, Hold: time.Second},
		FairScale: FairScaleOptions{Procs: 2, Rate: 100, Tenants: 3, Tasks: 50, WRate: 60, WTenants: 3, WTasks: 15,
			NewcomerAfter: 300 * time.Millisecond},
		KeyRate:  KeyRateOptions{Procs: 2, Rate: 100, KeyRate: 2, Tenants: 60, Tasks: 3, Enqueuers: 8},
		KeyCap:   KeyCapOptions{Procs: 2, Rate: 100, Tenants: 4, Tasks: 5, Call: 50 * time.Millisecond},
		Progress: logWriter{t, start},
	}
	rep, err := Run(ctx, opts)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	r := rep.Release
	if r == nil {
		t.Fatal("no release report")
	}
	if len(r.Economy) != 3 {
		t.Fatalf("economy rows = %d, want 3 (raw asynq, shaper default, shaper workers: 20)", len(r.Economy))
	}
	for _, x := range r.Economy {
		if x.Error != "" || x.Delivered != 20 || x.CmdsPerTask <= 0 {
			t.Errorf("economy %s: %d/20 delivered, %.1f commands per task, error %q", x.Contender, x.Delivered, x.CmdsPerTask, x.Error)
		}
		if x.Contender != econRaw && (x.ScriptsPerTask <= 0 || x.VsRaw <= 0) {
			t.Errorf("economy %s: %.2f scripts per task, %.2f× raw; want both > 0", x.Contender, x.ScriptsPerTask, x.VsRaw)
		}
	}
	if got := r.Economy[2].Workers; got != 20 {
		t.Errorf("economy with workers: 20 logged %d workers", got)
	}
	if len(r.Keepup) != 1 || r.Keepup[0].Delivered != 20 || r.Keepup[0].MaxIn1sRelease == 0 ||
		r.Keepup[0].MaxIn1sSlot == 0 || r.Keepup[0].Workers == 0 {
		t.Errorf("keepup rows: %+v, want one with 20 delivered, release and slot times and the worker count", r.Keepup)
	}
	if len(r.Idle) != 3 {
		t.Fatalf("idle rows = %d, want 3 (1 and 3 downstreams, raw asynq)", len(r.Idle))
	}
	for _, x := range r.Idle {
		if x.Error != "" || x.CmdsPerS <= 0 || x.Connections <= 0 {
			t.Errorf("idle %s × %d: %+v", x.Who, x.Downstreams, x)
		}
		if x.Who == "shaper" && (x.Goroutines <= 0 || x.RSSMB <= 0 || x.StartS <= 0) {
			t.Errorf("idle shaper × %d: goroutines %v, RSS %v MB, start %v s; want all > 0", x.Downstreams, x.Goroutines, x.RSSMB, x.StartS)
		}
	}
	k := r.Kill
	if k == nil || k.Error != "" || k.Delivered == 0 || k.KilledAtS < 1 || k.Workers == 0 || k.Recovered < 0 {
		t.Errorf("kill row: %+v", k)
	}
	if p := r.Pause; p == nil || p.Error != "" || !p.Complete || p.Delivered != 60 || p.Workers == 0 || p.ZeroAfterS < 0 ||
		p.PausedMax != 0 || p.ReleasedPaused != 0 || p.FirstAfterResumeS < 0 || p.Duplicates != 0 {
		t.Errorf("pause row: %+v; want 60 delivered once, the active list empty while paused, nothing delivered from 2 s after the pause, a delivery after the resume", p)
	}
	if len(r.Fair) != 3 {
		t.Fatalf("fair rows = %d, want 3 (FIFO, fair, fair 2:1:1)", len(r.Fair))
	}
	for _, x := range r.Fair {
		if x.Error != "" || x.Delivered != 50 || x.BLastS <= 0 || x.CmdsPerTask <= 0 || x.Workers == 0 || x.MaxIn1s == 0 {
			t.Errorf("fair %s: %+v; want 50 delivered, B's last release, commands per task and the worker count", x.Mode, x)
		}
	}
	if len(r.Priority) != 3 {
		t.Fatalf("priority rows = %d, want 3 (FIFO, strict, weighted)", len(r.Priority))
	}
	for _, x := range r.Priority {
		if x.Error != "" || !x.Complete || x.LatMaxS <= 0 || x.Workers == 0 || x.MaxIn1s == 0 {
			t.Errorf("priority %s: %+v; want the 5 urgent released, their latencies and the worker count", x.Mode, x)
		}
	}
	if len(r.FairScale) != 2 {
		t.Fatalf("fairscale rows = %d, want 2 (equal, weighted 3:2:1)", len(r.FairScale))
	}
	for i, x := range r.FairScale {
		want := []int{151, 90}[i] // 3 × 50 and the newcomer; 15 × (3+2+1), 1.5 s each
		if x.Error != "" || !x.Complete || x.Delivered != want || x.KeepUp <= 0 || x.MaxIn1s == 0 || x.BusyS <= 0 ||
			x.Jain <= 0 || x.CmdsPerTask <= 0 || x.Workers == 0 || (i == 0) != (x.NewcomerS > 0) {
			t.Errorf("fairscale %s: %+v; want %d delivered, keep-up, Jain over a common window, commands per task, the worker count and the newcomer's release in run equal only", x.Mode, x, want)
		}
	}
	if got, want := r.FairScale[1].Fairness, "{key: tenant, weights: {t00: 3, t01: 2}}"; got != want {
		t.Errorf("weighted fairness = %q, want %q", got, want)
	}
	if len(r.KeyRate) != 1 {
		t.Fatalf("keyrate rows = %d, want 1 (no control run)", len(r.KeyRate))
	}
	if x := r.KeyRate[0]; x.Error != "" || !x.Complete || x.Delivered != 180 || x.KeyMaxIn1s == 0 || x.KeepUp <= 0 ||
		x.MaxIn1s == 0 || x.TenantP50S <= 0 || x.CmdsPerTask <= 0 || x.Workers == 0 {
		t.Errorf("keyrate row: %+v; want 180 delivered (60 tenants × 3), the most of one tenant in 1 s, keep-up, tenant drains, commands per task and the worker count", x)
	}
	if len(r.KeyCap) != 2 {
		t.Fatalf("keycap rows = %d, want 2 (fifo, fair)", len(r.KeyCap))
	}
	for _, x := range r.KeyCap {
		if x.Error != "" || !x.Complete || x.Delivered != 20 || x.MostOfAKey != 1 || x.MostInFlight < 2 || x.CmdsPerTask <= 0 || x.ActiveMax > 2*4 {
			t.Errorf("keycap %s: %+v; want 20 delivered, one call of a key at a time, several keys at once, commands per task, at most twice the 4 places active", x.Order, x)
		}
	}
	md := rep.Markdown()
	for _, want := range []string{"### 7. Release path", "#### 7g.", "#### 7j.", "#### 7h.", "| `{key: tenant, key_rate: 2/s}` |", "| weighted 3:2:1 |", "#### 7a.", "#### 7b.", "#### 7c.", "#### 7d.", "#### 7e.", "#### 7f.", "#### 7i.", "| fair 2:1:1 |", "| 20/s | asynq, no limit |",
		"| 20/s | shaper, workers: 20 | 20 |", "Per extra downstream in one process (3 vs 1 downstreams)"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

// fillKeyRate on made-up releases: one tenant with three releases inside
// a second, one spaced at its ceiling, one task never released.
func TestFillKeyRate(t *testing.T) {
	t0 := time.Unix(3000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	hit := func(s float64, tenant string, n int) testsink.Hit {
		return testsink.Hit{At: at(s + 0.01), Wake: at(s), Payload: fmt.Sprintf(`{"t":%q,"n":%d}`, tenant, n)}
	}
	enq := map[string][]time.Time{"a": {at(0), at(0), at(0)}, "b": {at(0.5), at(0.5), at(0.5)}, "c": {at(1), at(1), at(1)}}
	hits := []testsink.Hit{hit(1, "a", 0), hit(1.2, "a", 1), hit(1.9, "a", 2), hit(2.0, "b", 0), hit(2.5, "b", 1), hit(3.0, "b", 2),
		hit(3.0, "b", 2), hit(4, "c", 0), hit(5, "c", 1)}
	row := KeyRateRow{Rate: 10, KeyRate: 2, Tenants: 3, TasksEach: 3, Tasks: 9}
	// releases (duplicates too) by second from the first, at 1 s: a a a | b b | b b | c | c

	fillKeyRate(&row, []string{"a", "b", "c"}, enq, hits)
	if row.Delivered != 8 || row.Duplicates != 1 || row.KeyMaxIn1s != 3 || row.KeysOver != 0 || row.KeyMinGapS != 0.2 {
		t.Errorf("delivered %d, duplicates %d, most of one tenant in 1 s %d, over %d, closest %v; want 8, 1, 3, 0, 0.2",
			row.Delivered, row.Duplicates, row.KeyMaxIn1s, row.KeysOver, row.KeyMinGapS)
	}
	// a done 1.9 s after its enqueue, b 2.5 s; c is not done.
	if row.TenantP50S != 1.9 || row.TenantP99S != 2.5 || row.LeastAloneS != 1 || row.LeastMedianS != 0.6 || row.EnqueueS != 1 || row.MaxIn1s != 3 {
		t.Errorf("tenant drains %v / %v, least %v / %v, enqueue %v s, max in 1 s %d; want 1.9 / 2.5, 1 / 0.6, 1, 3",
			row.TenantP50S, row.TenantP99S, row.LeastAloneS, row.LeastMedianS, row.EnqueueS, row.MaxIn1s)
	}
	if want := []int{3, 2, 2, 1, 1}; !slices.Equal(row.PerSecond, want) {
		t.Errorf("releases per second %v, want %v", row.PerSecond, want)
	}
	row.KeyRate = 1 // bound 2: a (3 in 1 s) is over it
	fillKeyRate(&row, []string{"a", "b", "c"}, enq, hits)
	if row.KeysOver != 1 {
		t.Errorf("over the bound at key_rate 1: %d, want 1", row.KeysOver)
	}
}

func TestKeepUpRateSkipsTheFirstSecond(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var ts []time.Time
	for i := 0; i < 5; i++ { // a slow first second: 5 releases
		ts = append(ts, t0.Add(time.Duration(i)*200*time.Millisecond))
	}
	for i := 0; i <= 40; i++ { // then 20/s for 2 s
		ts = append(ts, t0.Add(time.Second+time.Duration(i)*50*time.Millisecond))
	}
	if got := keepUpRate(ts, time.Second); got < 19.99 || got > 20.01 {
		t.Errorf("keepUpRate = %v, want 20", got)
	}
	if got := keepUpRate(ts, 0); got > 15.5 { // 45 events over 3 s
		t.Errorf("keepUpRate without a skip = %v, want ~15 (the slow start counted)", got)
	}
	if got := keepUpRate(ts[:1], time.Second); got != 0 {
		t.Errorf("keepUpRate of one event = %v, want 0", got)
	}
}

func TestFillKill(t *testing.T) {
	kill := time.Unix(2000, 0)
	at := func(s float64) time.Time { return kill.Add(time.Duration(s * float64(time.Second))) }
	hits := []testsink.Hit{
		{At: at(-5), TaskID: "a", Payload: "0"},
		{At: at(4), TaskID: "b", Payload: "1"},  // held by a survivor
		{At: at(12), TaskID: "c", Payload: "2"}, // stranded, back after 12 s
		{At: at(12.1), TaskID: "c", Payload: "2"},
		{At: at(14), TaskID: "e", Payload: "4"},
	}
	row := KillRow{Backlog: 5, IdealS: 4}
	fillKill(&row, hits, []string{"b", "c"}, kill)
	want := KillRow{Backlog: 5, IdealS: 4, ActiveAtKill: 2, Stranded: 1, LastActiveS: 12, RunS: 19, ExtraS: 15,
		Delivered: 4, Lost: 1, Duplicates: 1}
	if row != want {
		t.Errorf("fillKill:\n got %+v\nwant %+v", row, want)
	}
	row = KillRow{Backlog: 5, LastActiveS: -1}
	fillKill(&row, hits, []string{"b", "d"}, kill) // d never delivered
	if row.LastActiveS != -1 || row.Stranded != 1 {
		t.Errorf("with a task never delivered: last %v, stranded %d; want -1 and 1", row.LastActiveS, row.Stranded)
	}
}

// The start line is found even when a write splits it and hundreds of
// lines follow it (the tail buffer alone would lose it).
func TestLogWatchFindsStartLine(t *testing.T) {
	w := &logWatch{started: time.Now().Add(-time.Second)}
	line := `{"time":"x","level":"INFO","msg":"shaper started","redis":"r","http":"127.0.0.1:4567","downstreams":2}` + "\n"
	w.Write([]byte(line[:30]))
	if d, _, _ := w.state(); d != 0 {
		t.Errorf("ready after half a line: %v", d)
	}
	w.Write([]byte(line[30:]))
	for i := 0; i < 200; i++ {
		w.Write([]byte(`{"msg":"downstream","name":"ds","workers":11}` + "\n"))
	}
	d, addr, workers := w.state()
	if d < time.Second || addr != "127.0.0.1:4567" || workers != 11 {
		t.Errorf("state = %v, %q, %d; want >= 1s, 127.0.0.1:4567, 11", d, addr, workers)
	}
	if strings.Contains(w.tail.String(), "shaper started") {
		t.Error("the tail still holds the start line; the test does not cover a rolled-over tail")
	}
}

package bench

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/testsink"
	"github.com/shaper-io/shaper/limiters"
)

// Every scenario at toy sizes, end to end on a throwaway redis-server:
// the report has the rows and tables the docs quote.
func TestSmallestRunHasEveryRow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := Options{
		Quick:      true,
		Scenarios:  []string{ScenarioFidelity, ScenarioDecisions, ScenarioOverhead, ScenarioMemory, ScenarioGrowth},
		ShaperMode: ModeDispatchers, // no go build inside a test
		Backlog:    20, Procs: []int{1}, BurstOneLimit: time.Second,
		DecisionTime: 20 * time.Millisecond, DecisionRounds: 1, BenchmarkRequests: 200, Rounds: 1,
		OverheadTasks: 40, EnqueueTasks: 40, EnqueueRounds: 1,
		MemKeys: 200, Levels: []int{100, 200}, EntryBudget: 100_000, LatencySamples: 20,
	}
	start := time.Now()
	opts.Progress = logWriter{t, start}
	rep, err := Run(ctx, opts)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("run took %v", time.Since(start))

	if got, want := len(rep.Fidelity), len(AllContenders()); got != want {
		t.Errorf("fidelity rows = %d, want %d (one per contender at P=1)", got, want)
	}
	for _, r := range rep.Fidelity {
		if r.Error != "" {
			t.Errorf("fidelity %s: error %s", r.Contender, r.Error)
		}
		if r.MaxIn1sRelease == 0 {
			t.Errorf("fidelity %s: no release times (X-Shaper-Released) recorded", r.Contender)
		}
		if !burstOne(idOf(r.Contender)) && (!r.Complete || r.Delivered != 20) {
			t.Errorf("fidelity %s: delivered %d of 20 (complete %v), want all", r.Contender, r.Delivered, r.Complete)
		}
	}
	if got, want := len(rep.Decisions), len(limiters.Algorithms())+2; got != want {
		t.Errorf("decision rows = %d, want %d (five algorithms, redis_rate, shaping)", got, want)
	}
	for _, r := range rep.Decisions {
		if r.Error != "" || r.PerSec["g=64"] <= 0 {
			t.Errorf("decisions %s: %v decisions/s, error %q", r.Limiter, r.PerSec, r.Error)
		}
	}
	if len(rep.Processing) != 2 || len(rep.Enqueue) != 6 {
		t.Errorf("overhead rows = %d processing, %d enqueue; want 2 and 6", len(rep.Processing), len(rep.Enqueue))
	}
	for _, r := range rep.Processing {
		if r.Ratio <= 0 {
			t.Errorf("processing %s: ratio %v (error %q)", r.Handler, r.Ratio, r.Error)
		}
	}
	if got, want := len(rep.Memory), len(limiters.Algorithms())+3; got != want { // + redis_rate, 2 sub-window counters
		t.Errorf("memory rows = %d, want %d", got, want)
	}
	for _, r := range rep.Memory {
		if r.Error != "" || r.MemoryUsage <= 0 || r.Keys != 200 {
			t.Errorf("memory %s: %+v", r.Family, r)
		}
	}
	// 11 families (five algorithms, redis_rate, two sub-window counters,
	// three full sliding logs) at 2 levels; the log of 1000 at 200 keys
	// passes the entry budget.
	if got := len(rep.Growth); got != 22 {
		t.Errorf("growth rows = %d, want 22", got)
	}
	skipped := 0
	for _, r := range rep.Growth {
		if r.Skipped != "" {
			skipped++
		}
		if r.Error != "" {
			t.Errorf("growth %s at %d: %s", r.Family, r.Keys, r.Error)
		}
	}
	if skipped != 1 {
		t.Errorf("%d growth rows skipped, want 1 (sliding log of 1000 at 200 keys)", skipped)
	}

	md := rep.Markdown()
	for _, want := range []string{
		"### 1. Fidelity", "### 2. Deferral", "### 3. Decision throughput", "### 4. Overhead",
		"### 5. Memory per key", "### 6. Cost growth",
		"| shaper | 1 |", "| asynq + x/time/rate recipe (burst 3R) | 1 |", "| asynq + redis_rate (GCRA, burst R) | 1 |",
		"| asynq, no limit | 1 |", "| token_bucket |", "| redis_rate (GCRA) |", "| sliding_log, full at 1000 | 200 | skipped",
		"| no-op (Go) |", "| queue.Producer.Enqueue + token bucket admission | 16 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	path := filepath.Join(t.TempDir(), "out.json")
	if err := rep.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	var back Report
	b, _ := os.ReadFile(path)
	if err := json.Unmarshal(b, &back); err != nil || len(back.Fidelity) != len(rep.Fidelity) {
		t.Errorf("JSON round trip: %v, %d fidelity rows", err, len(back.Fidelity))
	}
}

// logWriter sends progress lines to the test log, stamped with the time
// since start.
type logWriter struct {
	t     *testing.T
	start time.Time
}

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Logf("%5.1fs %s", time.Since(w.start).Seconds(), strings.TrimSpace(string(p)))
	return len(p), nil
}

func idOf(name string) string {
	for id, n := range contenderNames {
		if n == name {
			return id
		}
	}
	return ""
}

func TestFillFidelityOrderAndWindows(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var hits []testsink.Hit
	// 5 tasks, 20 ms apart, tasks 1 and 2 swapped, task 3 delivered twice.
	for i, n := range []int{0, 2, 1, 3, 3, 4} {
		at := t0.Add(time.Duration(i) * 20 * time.Millisecond)
		hits = append(hits, testsink.Hit{At: at, Wake: at.Add(-time.Millisecond), Payload: string(payload(n))})
	}
	row := FidelityRow{Backlog: 5, IdealDrainS: 0.08}
	fillFidelity(&row, hits, 50)
	if row.Delivered != 5 || row.Releases != 6 {
		t.Errorf("delivered %d, releases %d; want 5 and 6", row.Delivered, row.Releases)
	}
	if row.MaxIn1s != 6 || row.MaxIn1sRelease != 6 {
		t.Errorf("max in 1s = %d at the sink, %d at release; want 6 and 6", row.MaxIn1s, row.MaxIn1sRelease)
	}
	if row.MaxDisplacement != 1 {
		t.Errorf("max displacement = %d, want 1", row.MaxDisplacement)
	}
	// first deliveries: 0 2 1 3 4 → 3 of 4 steps increase
	if row.InOrderPct != 75 {
		t.Errorf("in order = %v%%, want 75", row.InOrderPct)
	}
	if row.IntervalP50ms != 20 {
		t.Errorf("interval p50 = %v ms, want 20", row.IntervalP50ms)
	}
}

func TestPercentileAndNum(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3}
	for _, c := range []struct{ q, want float64 }{{0.5, 3}, {0.99, 5}, {0, 1}, {0.2, 1}, {0.21, 2}} {
		if got := percentile(xs, c.q); got != c.want {
			t.Errorf("percentile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	for _, c := range []struct {
		x    float64
		n    int
		want string
	}{{1234567.891, 1, "1,234,567.9"}, {-5.25, 1, "−5.2"}, {999, 0, "999"}, {-0.01, 1, "0.0"}} {
		if got := num(c.x, c.n); got != c.want {
			t.Errorf("num(%v, %d) = %q, want %q", c.x, c.n, got, c.want)
		}
	}
}

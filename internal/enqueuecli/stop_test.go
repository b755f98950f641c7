package enqueuecli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/testutil"
	"github.com/shaper-io/shaper/queue"
)

// Redis killed in the middle of a concurrent run: the report (JSON and
// stderr alike) names the first line not known to be stored, and every
// line before it is in Redis; every stored line from it on is listed as
// enqueued after the stop or as uncertain. Checked against what Redis
// holds once it is back (its AOF is written before each reply).
func TestRedisKilledMidRunReport(t *testing.T) {
	t.Parallel()
	for _, n := range []int{8, 16} {
		t.Run(fmt.Sprintf("concurrency %d", n), func(t *testing.T) {
			t.Parallel()
			srv, err := redistest.Start("--appendonly", "yes", "--appendfsync", "always")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { srv.Stop(); srv.Cleanup() })
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
			t.Cleanup(func() { rdb.Close() })
			prefix := redistest.Prefix(t)
			const total = 50000
			path := filepath.Join(t.TempDir(), "tasks.jsonl")
			var in strings.Builder
			for i := 1; i <= total; i++ {
				fmt.Fprintf(&in, `{"downstream":"api","payload":%d}`+"\n", i)
			}
			os.WriteFile(path, []byte(in.String()), 0o600)

			var stdout, stderr testutil.SyncBuffer
			done := make(chan int, 1)
			go func() {
				done <- Main(context.Background(), []string{"--redis", "redis://" + srv.Addr, "--prefix", prefix,
					"--file", path, "--concurrency", strconv.Itoa(n), "--json", "--progress", "never"},
					IO{Stdout: &stdout, Stderr: &stderr})
			}()
			inspector := queue.NewInspector(rdb, prefix)
			t.Cleanup(func() { inspector.Asynq().Close() })
			deadline := time.Now().Add(30 * time.Second)
			for {
				if bl, err := inspector.Backlog("api"); err == nil && bl.Pending >= 1000 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("1000 tasks not enqueued within 30s; stderr %q", stderr.String())
				}
				time.Sleep(10 * time.Millisecond) // poll interval, bounded by the deadline
			}
			srv.Stop()
			var code int
			select {
			case code = <-done:
			case <-time.After(60 * time.Second):
				t.Fatal("enqueue did not end within 60s of Redis stopping")
			}
			var s Summary
			if err := json.Unmarshal([]byte(stdout.String()), &s); err != nil {
				t.Fatalf("summary: %v: %q", err, stdout.String())
			}
			if err := srv.StartAgain(); err != nil {
				t.Fatal(err)
			}
			stored := storedLines(t, inspector, prefix+":api")
			checkStopReport(t, code, s, stderr.String(), path, stored, total)
		})
	}
}

// storedLines reads the line number (the payload) of every task in queue.
func storedLines(t *testing.T, in *queue.Inspector, q string) map[int]int {
	t.Helper()
	stored := map[int]int{}
	for page := 1; ; page++ {
		tasks, err := in.Asynq().ListPendingTasks(q, asynq.PageSize(1000), asynq.Page(page))
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		for _, task := range tasks {
			line, err := strconv.Atoi(string(task.Payload))
			if err != nil {
				t.Fatalf("payload %q", task.Payload)
			}
			stored[line]++
		}
		if len(tasks) < 1000 {
			return stored
		}
	}
}

func checkStopReport(t *testing.T, code int, s Summary, stderr, path string, stored map[int]int, total int) {
	t.Helper()
	p := s.StoppedAtLine
	t.Logf("exit %d, stopped at %d, %d accepted, %d failed, uncertain %v, enqueued after %v; %d stored; stderr %q",
		code, p, s.Accepted, s.Failed, s.UncertainLines, s.EnqueuedAfterStop, len(stored), stderr)
	if code != ExitRedis || p <= 1 || p > total {
		t.Fatalf("exit %d, stopped_at_line %d, want exit 3 and a line within the run; stderr %q", code, p, stderr)
	}
	for line := 1; line < p; line++ {
		if stored[line] != 1 {
			t.Fatalf("line %d comes before stopped_at_line %d but is stored %d times", line, p, stored[line])
		}
	}
	for line, k := range stored {
		if k != 1 {
			t.Errorf("line %d is stored %d times", line, k)
		}
		if line >= p && !slices.Contains(s.UncertainLines, line) && !slices.Contains(s.EnqueuedAfterStop, line) {
			t.Errorf("line %d (from stopped_at_line %d on) is stored but reported neither uncertain nor enqueued", line, p)
		}
	}
	for _, line := range s.EnqueuedAfterStop {
		if line <= p || stored[line] != 1 {
			t.Errorf("line %d is reported enqueued after the stop at %d, but is stored %d times", line, p, stored[line])
		}
	}
	for _, line := range s.UncertainLines {
		if line < p {
			t.Errorf("uncertain line %d comes before stopped_at_line %d", line, p)
		}
	}
	if s.Accepted != p-1+len(s.EnqueuedAfterStop) || s.Uncertain != len(s.UncertainLines) ||
		s.Tasks != s.Accepted+s.Failed+s.Uncertain {
		t.Errorf("summary %+v does not add up: want accepted = %d before the stop + %d after, uncertain = %d listed, tasks = the sum",
			s, p-1, len(s.EnqueuedAfterStop), len(s.UncertainLines))
	}
	want := fmt.Sprintf("enqueue: stopped at line %d of %s: redis unreachable", p, path)
	if strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, want) ||
		!strings.Contains(stderr, fmt.Sprintf("every line before %d was handled", p)) {
		t.Errorf("stderr %q, want one line starting %q", stderr, want)
	}
	if len(s.UncertainLines) > 0 && !strings.Contains(stderr, "outcome unknown, so maybe stored: line "+lineList(s.UncertainLines, 20)) {
		t.Errorf("stderr %q does not list the uncertain lines %v", stderr, s.UncertainLines)
	}
}

// The ledger keeps the prefix of handled lines whatever order the outcomes
// come in.
func TestLedger(t *testing.T) {
	t.Parallel()
	l := newLedger()
	steps := []struct {
		line          int
		o             outcome
		wantLine      int
		wantUncertain []int
		wantAfter     []int
	}{
		{2, enqueued, 1, nil, []int{2}},
		{1, handled, 3, nil, nil},
		{5, enqueued, 3, nil, []int{5}},
		{3, unknown, 3, []int{3}, []int{5}},
		{4, enqueued, 3, []int{3}, []int{4, 5}},
		{7, open, 3, []int{3}, []int{4, 5}},
		{6, unknown, 3, []int{3, 6}, []int{4, 5}},
	}
	for i, s := range steps {
		l.record(s.line, s.o)
		r := l.report()
		if r.line != s.wantLine || !slices.Equal(r.uncertain, s.wantUncertain) || !slices.Equal(r.enqueuedAfter, s.wantAfter) {
			t.Errorf("step %d: got %+v, want line %d, uncertain %v, enqueued after %v", i, r, s.wantLine, s.wantUncertain, s.wantAfter)
		}
	}
	if got := lineList([]int{1, 3, 4, 5, 9, 10, 12}, 2); got != "1, 3-5 and 3 more lines (--json lists them all)" {
		t.Errorf("lineList = %q", got)
	}
	if got := lineList([]int{1, 3, 4, 5}, 20); got != "1, 3-5" {
		t.Errorf("lineList = %q", got)
	}
}

package main_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/shaper-io/shaper/internal/testutil"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/redistest"
)

// bin holds the example's API, shaper and enqueue, built as a user would.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "quota-api-bin-")
	if err != nil {
		panic(err)
	}
	bin = dir
	for name, pkg := range map[string]string{"quota-api": ".", "shaper": "../../cmd/shaper", "enqueue": "../../cmd/enqueue"} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, name), pkg).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build %s: %v\n%s", pkg, err, out)
			os.Exit(1)
		}
	}
	defer os.RemoveAll(dir)
	redistest.Main(m)
}

type lockedBuf = testutil.SyncBuffer

func start(t *testing.T, name string, args ...string) *lockedBuf {
	t.Helper()
	out := &lockedBuf{}
	cmd := exec.Command(filepath.Join(bin, name), args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("%s output:\n%s", name, out.String())
		}
	})
	return out
}

var waitFor = testutil.WaitFor

type stats struct {
	OK        int      `json:"ok"`
	Throttled int      `json:"throttled"`
	Payloads  []string `json:"payloads"`
}

func getStats(t *testing.T, base string) stats {
	t.Helper()
	resp, err := http.Get(base + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s stats
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

var listening = regexp.MustCompile(`listening on (http://\S+)`)

func startAPI(t *testing.T) string {
	t.Helper()
	out := start(t, "quota-api", "-listen", "127.0.0.1:0", "-quota", "10")
	var base string
	waitFor(t, 10*time.Second, "the quota API's address", func() bool {
		m := listening.FindStringSubmatch(out.String())
		if m != nil {
			base = m[1]
		}
		return m != nil
	})
	return base
}

// The fake API does enforce its quota: a burst straight at it gets 429s.
func TestQuotaAPIThrottlesABurst(t *testing.T) {
	base := startAPI(t)
	codes := map[int]int{}
	for i := 0; i < 20; i++ {
		resp, err := http.Post(base+"/charge", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		codes[resp.StatusCode]++
	}
	if codes[200] > 10 || codes[429] < 10 {
		t.Errorf("20 requests at once: %v, want at most 10 × 200 and the rest 429", codes)
	}
}

// The example as its shaper.yaml says: shaper at 8/s in front of the API
// with a quota of 10/s. 60 tasks enqueued at once with the enqueue CLI all
// arrive, and the API never answers 429.
func TestShaperKeepsUnderTheQuota(t *testing.T) {
	base := startAPI(t)
	raw, err := os.ReadFile("shaper.yaml")
	if err != nil {
		t.Fatal(err)
	}
	prefix := redistest.Prefix(t)
	cfg := strings.NewReplacer(
		"url: redis://127.0.0.1:6379/0", "url: "+redistest.URL(t),
		"prefix: quota-example", "prefix: "+prefix,
		"listen: 127.0.0.1:8080", "listen: 127.0.0.1:0",
		"http://127.0.0.1:9400/charge", base+"/charge",
	).Replace(string(raw))
	for _, s := range []string{redistest.URL(t), prefix, base + "/charge", "127.0.0.1:0"} {
		if !strings.Contains(cfg, s) {
			t.Fatalf("shaper.yaml changed shape: could not point it at %s", s)
		}
	}
	path := filepath.Join(t.TempDir(), "shaper.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	start(t, "shaper", "-config", path)

	const n = 60
	var lines bytes.Buffer
	for i := 0; i < n; i++ {
		fmt.Fprintf(&lines, `{"payload":{"charge":%d},"key":"customer-%d"}`+"\n", i, i%5)
	}
	enq := exec.Command(filepath.Join(bin, "enqueue"), "--config", path, "--downstream", "quota-api", "--json")
	enq.Stdin = &lines
	var out, errb bytes.Buffer
	enq.Stdout, enq.Stderr = &out, &errb
	if err := enq.Run(); err != nil {
		t.Fatalf("enqueue: %v\n%s%s", err, out.String(), errb.String())
	}
	var sum struct {
		Enqueued int `json:"enqueued"`
	}
	if err := json.Unmarshal(out.Bytes(), &sum); err != nil || sum.Enqueued != n {
		t.Fatalf("enqueue summary says %d enqueued, want %d: %s", sum.Enqueued, n, out.String())
	}
	start := time.Now()
	waitFor(t, 30*time.Second, fmt.Sprintf("%d charges at the API", n), func() bool { return getStats(t, base).OK >= n })
	took := time.Since(start)
	s := getStats(t, base)
	if s.Throttled != 0 {
		t.Errorf("the API answered 429 %d times, want 0", s.Throttled)
	}
	seen := map[string]int{}
	for _, p := range s.Payloads {
		seen[p]++
	}
	for i := 0; i < n; i++ {
		if c := seen[fmt.Sprintf(`{"charge":%d}`, i)]; c != 1 {
			t.Errorf("charge %d arrived %d times, want 1", i, c)
		}
	}
	// 60 releases at 8/s span 7.4 s.
	if took < 6*time.Second {
		t.Errorf("%d charges arrived in %v, faster than 8/s allows", n, took)
	}
	t.Logf("%d charges in %v, 0 throttled", s.OK, took)
}

package enqueuecli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/queue"
)

// A unique key or type that the HTTP handler could never deliver is bad
// input: reported on one line naming the field and the value, not
// enqueued, exit 2; the other lines go ahead.
func TestControlCharactersRefused(t *testing.T) {
	t.Parallel()
	prefix := redistest.Prefix(t)
	in := strings.Join([]string{
		`{"payload":1,"unique":"ok 1"}`,
		`{"payload":2,"unique":"a\nb"}`,
		`{"payload":3,"unique":"a\u0000"}`,
		`{"payload":4,"type":"charge\r"}`,
		`{"payload":5,"type":"` + strings.Repeat("t", 129) + `"}`,
	}, "\n")
	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), []string{"--redis", redistest.URL(t), "--prefix", prefix, "--downstream", "api", "--json"},
		IO{Stdin: strings.NewReader(in), Stdout: &stdout, Stderr: &stderr})
	var s Summary
	if err := json.Unmarshal(stdout.Bytes(), &s); err != nil {
		t.Fatalf("summary: %v: %q", err, stdout.String())
	}
	if code != ExitBadInput || s.Accepted != 1 || s.Invalid != 4 {
		t.Errorf("exit %d, summary %+v; want exit 2, 1 accepted, 4 invalid", code, s)
	}
	for _, want := range []string{
		`enqueue: stdin:2: unique key "a\nb": control character U+000A at byte 1`,
		`enqueue: stdin:3: unique key "a\x00": control character U+0000 at byte 1`,
		`enqueue: stdin:4: type "charge\r": control character U+000D at byte 6`,
		`enqueue: stdin:5: type "tttt`,
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr %q, want a line containing %q", stderr.String(), want)
		}
	}
	if n := strings.Count(stderr.String(), "\n"); n != 4 {
		t.Errorf("stderr has %d lines, want 4: %q", n, stderr.String())
	}
	inspector := queue.NewInspector(redistest.Client(t), prefix)
	defer inspector.Asynq().Close()
	if bl, err := inspector.Backlog("api"); err != nil || bl.Pending != 1 {
		t.Errorf("backlog %+v %v, want 1 pending", bl, err)
	}

	// --unique for one task: exit 2, one line.
	stderr.Reset()
	code = Main(context.Background(), []string{"--redis", redistest.URL(t), "--prefix", prefix, "--downstream", "api",
		"--payload", "{}", "--unique", "x\r\ny"}, IO{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr})
	if want := "enqueue: unique key \"x\\r\\ny\": control character U+000D at byte 1 (want printable text)\n"; code != ExitBadInput || stderr.String() != want {
		t.Errorf("--unique with CR LF: exit %d, stderr %q; want 2 and %q", code, stderr.String(), want)
	}
}

package redistest

import (
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Mutations are the inputs a short `go test -fuzz` run of a target would
// try, drawn without the fuzzing engine, so the normal (race) test run
// covers them and the suite builds no fuzz-instrumented binaries: n
// inputs, each a corpus entry (the target's committed corpus in
// testdata/fuzz/<target> and the seeds given, as f.Add takes them) with
// one to four byte mutations per argument (flip, insert, delete,
// duplicate, an interesting byte, a splice from another entry) the way the
// engine mutates. Deterministic in seed: a failure names its input and
// reruns the same. Arguments are []byte or string; the result's arguments
// have the seeds' types.
func Mutations(tb testing.TB, target string, seed int64, n int, seeds ...[]any) [][]any {
	tb.Helper()
	corpus := append([][]any(nil), seeds...)
	files, _ := filepath.Glob(filepath.Join("testdata", "fuzz", target, "*"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) == 0 || lines[0] != "go test fuzz v1" {
			tb.Fatalf("%s: not a go test fuzz v1 file", f)
		}
		var e []any
		for _, l := range lines[1:] {
			l = strings.TrimSpace(l)
			var kind string
			switch {
			case strings.HasPrefix(l, "[]byte(") && strings.HasSuffix(l, ")"):
				kind, l = "bytes", l[len("[]byte("):len(l)-1]
			case strings.HasPrefix(l, "string(") && strings.HasSuffix(l, ")"):
				kind, l = "string", l[len("string("):len(l)-1]
			default:
				tb.Fatalf("%s: value %q is neither []byte nor string", f, l)
			}
			s, err := strconv.Unquote(l)
			if err != nil {
				tb.Fatalf("%s: %q: %v", f, l, err)
			}
			if kind == "bytes" {
				e = append(e, []byte(s))
			} else {
				e = append(e, s)
			}
		}
		corpus = append(corpus, e)
	}
	if len(corpus) == 0 {
		tb.Fatalf("no corpus for %s", target)
	}
	rng := rand.New(rand.NewSource(seed))
	out := make([][]any, 0, n)
	for range n {
		base := corpus[rng.Intn(len(corpus))]
		in := make([]any, len(base))
		for j, a := range base {
			var b []byte
			switch v := a.(type) {
			case []byte:
				b = append([]byte(nil), v...)
			case string:
				b = []byte(v)
			default:
				tb.Fatalf("%s: argument %d is a %T, want []byte or string", target, j, a)
			}
			other := func() []byte {
				o := corpus[rng.Intn(len(corpus))]
				if j >= len(o) {
					return nil
				}
				switch v := o[j].(type) {
				case []byte:
					return v
				case string:
					return []byte(v)
				}
				return nil
			}
			for range 1 + rng.Intn(4) {
				b = mutate(rng, b, other)
			}
			if _, ok := a.(string); ok {
				in[j] = string(b)
			} else {
				in[j] = b
			}
		}
		out = append(out, in)
	}
	return out
}

var interesting = []byte{0, 1, 0x7f, 0x80, 0xff, '"', '\\', '{', '}', '[', ']', ',', ':', ';', '=', '-', '.', '0', '9', 'e', ' ', '\n', '\t'}

func mutate(rng *rand.Rand, b []byte, other func() []byte) []byte {
	switch op := rng.Intn(7); {
	case op == 0 && len(b) > 0: // flip a bit
		i := rng.Intn(len(b))
		b[i] ^= 1 << rng.Intn(8)
	case op == 1 && len(b) > 0: // set a byte to an interesting value
		b[rng.Intn(len(b))] = interesting[rng.Intn(len(interesting))]
	case op == 2 && len(b) > 0: // delete a range
		i := rng.Intn(len(b))
		j := i + 1 + rng.Intn(min(len(b)-i, 8))
		b = append(b[:i], b[j:]...)
	case op == 3 && len(b) > 0: // duplicate a range
		i := rng.Intn(len(b))
		j := i + 1 + rng.Intn(min(len(b)-i, 16))
		at := rng.Intn(len(b) + 1)
		chunk := append([]byte(nil), b[i:j]...)
		b = append(b[:at], append(chunk, b[at:]...)...)
	case op == 4: // splice in part of another entry
		o := other()
		if len(o) == 0 {
			return b
		}
		i := rng.Intn(len(o))
		j := i + 1 + rng.Intn(len(o)-i)
		at := rng.Intn(len(b) + 1)
		b = append(b[:at], append(append([]byte(nil), o[i:j]...), b[at:]...)...)
	case op == 5: // insert a random byte
		at := rng.Intn(len(b) + 1)
		b = append(b[:at], append([]byte{byte(rng.Intn(256))}, b[at:]...)...)
	default: // insert an interesting byte
		at := rng.Intn(len(b) + 1)
		b = append(b[:at], append([]byte{interesting[rng.Intn(len(interesting))]}, b[at:]...)...)
	}
	return b
}

// EachMutation runs body on each of Mutations' inputs and, once the test
// has failed, logs each input body ran on from then (the first is the one
// that failed it), however body stopped.
func EachMutation(t *testing.T, target string, seed int64, n int, seeds [][]any, body func(in []any)) {
	t.Helper()
	for i, in := range Mutations(t, target, seed, n, seeds...) {
		func() {
			defer func() {
				if t.Failed() {
					t.Logf("input %d: %q", i, in)
				}
			}()
			body(in)
		}()
	}
}

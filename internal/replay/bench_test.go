package replay_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/replay"
)

// benchLog is n arrivals over two downstreams at about 20 a second, 50
// tenants, costs 1 and 2: enough to reject, defer and queue.
func benchLog(n int) []byte {
	rng := rand.New(rand.NewPCG(3, 4))
	var b bytes.Buffer
	at := time.Date(2026, 1, 2, 15, 0, 0, 0, time.UTC)
	for range n {
		at = at.Add(time.Duration(rng.ExpFloat64() * float64(50*time.Millisecond)))
		ds := "api"
		if rng.IntN(4) == 0 {
			ds = "batch"
		}
		fmt.Fprintf(&b, `{"ts":%.6f,"downstream":%q,"key":"t%d","cost":%d}`+"\n",
			float64(at.UnixMicro())/1e6, ds, rng.IntN(50), 1+rng.IntN(2))
	}
	return b.Bytes()
}

// BenchmarkReplay replays 10,000 lines through cfgYAML's two downstreams
// (five algorithms, a shadow limiter, deferrals) and reports lines/s.
func BenchmarkReplay(b *testing.B) {
	log := benchLog(10_000)
	pl := buildPlan(b, "bench")
	b.SetBytes(int64(len(log)))
	b.ResetTimer()
	for range b.N {
		rep, err := replay.Run(context.Background(), pl, bytes.NewReader(log), replay.Options{})
		if err != nil || rep.Arrivals != 10_000 {
			b.Fatalf("%v arrivals, %v", rep, err)
		}
	}
	b.ReportMetric(float64(10_000*b.N)/b.Elapsed().Seconds(), "lines/s")
}

// BenchmarkReader is the parsing alone.
func BenchmarkReader(b *testing.B) {
	log := benchLog(10_000)
	b.SetBytes(int64(len(log)))
	b.ResetTimer()
	for range b.N {
		rd := replay.NewReader(bytes.NewReader(log), "")
		for {
			if _, err := rd.Next(); err != nil {
				break
			}
		}
	}
	b.ReportMetric(float64(10_000*b.N)/b.Elapsed().Seconds(), "lines/s")
}

// Command batchwrites throttles batch writes into a fragile database.
//
// It embeds shaper's dispatcher with a Go handler: each task carries a batch
// of rows and costs as many units as it has rows, so the downstream's rate
// is rows per second across every process. The "database" here is a
// clearly-labelled stand-in (legacyDB) that records each commit and chokes
// when it gets more rows in a second than it can take.
//
//	go run ./examples/batchwrites                       # embedded Redis
//	go run ./examples/batchwrites -redis redis://127.0.0.1:6379 -rows 2000 -rate 500/s
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// legacyDB stands in for a database that takes at most capacity rows in any
// second and fails (chokes) past that.
type legacyDB struct {
	capacity int
	mu       sync.Mutex
	commits  []commit
	choked   int
}

type commit struct {
	at   time.Time
	rows int
}

func (db *legacyDB) insert(rows []map[string]any) error {
	db.mu.Lock()
	defer db.mu.Unlock()
	now := time.Now()
	inLastSecond := 0
	for _, c := range db.commits {
		if now.Sub(c.at) < time.Second {
			inLastSecond += c.rows
		}
	}
	if inLastSecond+len(rows) > db.capacity {
		db.choked++
		return errors.New("legacy db: too many writes, lock timeout")
	}
	db.commits = append(db.commits, commit{at: now, rows: len(rows)})
	return nil
}

func (db *legacyDB) committed() (rows, batches int) {
	db.mu.Lock()
	defer db.mu.Unlock()
	for _, c := range db.commits {
		rows += c.rows
	}
	return rows, len(db.commits)
}

// maxRowsInWindow is the most rows committed within any window w.
func (db *legacyDB) maxRowsInWindow(w time.Duration) int {
	db.mu.Lock()
	defer db.mu.Unlock()
	best := 0
	for i := range db.commits {
		n := 0
		for j := i; j < len(db.commits) && db.commits[j].at.Sub(db.commits[i].at) < w; j++ {
			n += db.commits[j].rows
		}
		best = max(best, n)
	}
	return best
}

func main() {
	redisURL := flag.String("redis", "", "Redis URL (default: an embedded in-process Redis)")
	rows := flag.Int("rows", 300, "rows to import")
	batch := flag.Int("batch", 25, "rows per batch (the task's cost)")
	rateFlag := flag.String("rate", "100/s", "rows per second the database is written at")
	prefix := flag.String("prefix", "batchwrites", "Redis key prefix")
	flag.Parse()
	if err := run(*redisURL, *rows, *batch, *rateFlag, *prefix, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "batchwrites:", err)
		os.Exit(1)
	}
}

func run(redisURL string, rows, batch int, rateFlag, prefix string, out io.Writer) error {
	rate, err := limiters.ParseLimit(rateFlag)
	if err != nil {
		return err
	}
	if rows < 1 || batch < 1 {
		return fmt.Errorf("-rows and -batch must be at least 1")
	}
	var rdb *redis.Client
	if redisURL == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer mr.Close()
		rdb = redis.NewClient(&redis.Options{Addr: mr.Addr()})
	} else {
		opt, err := redis.ParseURL(redisURL)
		if err != nil {
			return err
		}
		rdb = redis.NewClient(opt)
	}
	defer rdb.Close()
	ctx := context.Background()

	// The database takes the shaped rate, plus one batch of slack.
	db := &legacyDB{capacity: int(rate.PerSec()) + batch}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	d := shaping.New(rdb, shaping.Config{Prefix: prefix, Logger: quiet})
	err = d.Add(shaping.Downstream{
		Name: "legacy-db", Rate: rate, MaxWait: 2 * time.Second, Workers: 8,
		Handler: func(ctx context.Context, t *shaping.Task) error {
			var rows []map[string]any
			if err := json.Unmarshal(t.Payload, &rows); err != nil {
				return shaping.Permanent(err) // a malformed batch is archived, not retried
			}
			return db.insert(rows)
		},
	})
	if err != nil {
		return err
	}
	p := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix})
	defer p.Close()
	for start := 0; start < rows; start += batch {
		var b []map[string]any
		for i := start; i < min(start+batch, rows); i++ {
			b = append(b, map[string]any{"id": i, "amount": i * 7 % 100})
		}
		payload, _ := json.Marshal(b)
		if _, err := p.Enqueue(ctx, queue.Task{Downstream: "legacy-db", Payload: payload, Cost: int64(len(b))}); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "enqueued %d rows in batches of %d; writing at %s\n", rows, batch, rate.RateString())
	begin := time.Now()
	if err := d.Start(); err != nil {
		return err
	}
	deadline := time.Now().Add(time.Duration(float64(rows)/rate.PerSec()*float64(time.Second)) + 30*time.Second)
	for {
		n, _ := db.committed()
		if n >= rows {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d rows committed before the deadline", n, rows)
		}
		time.Sleep(50 * time.Millisecond) // progress poll
	}
	took := time.Since(begin)
	if err := d.Shutdown(ctx); err != nil {
		return err
	}
	n, batches := db.committed()
	fmt.Fprintf(out, "committed %d rows in %d batches in %.1fs (%.0f rows/s); max rows in any 1s window: %d; database choked: %d times\n",
		n, batches, took.Seconds(), float64(n)/took.Seconds(), db.maxRowsInWindow(time.Second), db.choked)
	return nil
}

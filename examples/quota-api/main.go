// Command quota-api is a stand-in for a third-party API with a hard quota:
// it answers 200 to at most -quota requests in any sliding second and 429
// (with Retry-After: 1) to the rest, and counts both. shaper.yaml in this
// folder protects it: releases at 8/s, under its quota of 10/s, so it never
// sees a 429 however fast tasks are enqueued.
//
//	go run ./examples/quota-api -listen 127.0.0.1:9400 -quota 10
//	curl -s 127.0.0.1:9400/stats      # {"ok":…,"throttled":…}
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"sync"
	"time"
)

// quotaAPI answers 429 past quota requests in any sliding second.
type quotaAPI struct {
	quota int

	mu        sync.Mutex
	recent    []time.Time // accepted requests in the last second
	ok        int
	throttled int
	payloads  []string
}

func (q *quotaAPI) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	now := time.Now()
	q.mu.Lock()
	defer q.mu.Unlock()
	keep := q.recent[:0]
	for _, t := range q.recent {
		if now.Sub(t) < time.Second {
			keep = append(keep, t)
		}
	}
	q.recent = keep
	if len(q.recent) >= q.quota {
		q.throttled++
		w.Header().Set("Retry-After", "1")
		http.Error(w, `{"error":"quota exceeded"}`, http.StatusTooManyRequests)
		return
	}
	q.recent = append(q.recent, now)
	q.ok++
	q.payloads = append(q.payloads, string(body))
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"charged":%d}`, q.ok)
}

func (q *quotaAPI) stats(w http.ResponseWriter, r *http.Request) {
	q.mu.Lock()
	defer q.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"ok": q.ok, "throttled": q.throttled, "quota_per_second": q.quota, "payloads": q.payloads})
}

func main() {
	listen := flag.String("listen", "127.0.0.1:9400", "address to listen on")
	quota := flag.Int("quota", 10, "requests allowed in any sliding second")
	flag.Parse()
	q := &quotaAPI{quota: *quota}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charge", q.serve)
	mux.HandleFunc("GET /stats", q.stats)
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	// The address on stdout, so a script (or a test) can find the port.
	fmt.Fprintf(os.Stdout, "quota-api listening on http://%s (quota %d/s)\n", ln.Addr(), *quota)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.Serve(ln))
}

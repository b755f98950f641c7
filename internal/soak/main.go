// Command soak pushes many tasks through several real shaper processes and
// samples their goroutines and resident memory, to show both stay flat
// (a manual check, not part of CI: it takes about a minute).
//
//	go run ./internal/soak -tasks 100000 -procs 3 -rate 2000/s
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/testsink"
	"github.com/shaper-io/shaper/queue"
)

func main() {
	tasks := flag.Int("tasks", 100000, "tasks to push through")
	procs := flag.Int("procs", 3, "shaper processes")
	rate := flag.String("rate", "2000/s", "release rate")
	every := flag.Duration("sample", 5*time.Second, "sampling interval")
	flag.Parse()
	if err := run(*tasks, *procs, *rate, *every); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

var addrRE = regexp.MustCompile(`"http":"([^"]+)"`)

func run(n, procs int, rate string, every time.Duration) error {
	dir, err := os.MkdirTemp("", "shaper-soak-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "shaper")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/shaper").CombinedOutput(); err != nil {
		return fmt.Errorf("build: %v: %s", err, out)
	}
	srv, err := redistest.Start()
	if err != nil {
		return err
	}
	defer srv.Cleanup()
	defer srv.Stop()
	sink := testsink.New()
	defer sink.Close()
	if err := enqueue(srv.Addr, n); err != nil {
		return err
	}
	cfg := filepath.Join(dir, "shaper.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`
redis: {url: "redis://%s", prefix: soak}
http: {listen: "127.0.0.1:0"}
downstreams:
  - {name: api, rate: %s, max_wait: 500ms, handler: {type: http, url: %q}}
`, srv.Addr, rate, sink.URL())), 0o600)
	addrs, stop, err := startShapers(bin, cfg, procs)
	defer stop()
	if err != nil {
		return err
	}
	fmt.Printf("%d processes at %s\n\n", procs, rate)
	watch(addrs, sink, n, every)
	return nil
}

// enqueue puts n tasks into the queue from 8 goroutines: the backlog.
func enqueue(addr string, n int) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	p := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: "soak"})
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				if _, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	fmt.Printf("enqueued %d tasks in %s\n", n, time.Since(start).Round(time.Millisecond))
	return nil
}

// startShapers starts procs shaper processes on cfg and returns their
// HTTP addresses (as each logs it on start); stop interrupts them and
// waits for them to exit.
func startShapers(bin, cfg string, procs int) (addrs []string, stop func(), err error) {
	var cmds []*exec.Cmd
	stop = func() {
		for _, c := range cmds {
			c.Process.Signal(os.Interrupt)
			c.Wait()
		}
	}
	for i := 0; i < procs; i++ {
		cmd := exec.Command(bin, "-config", cfg)
		stderr, _ := cmd.StderrPipe()
		if err := cmd.Start(); err != nil {
			return addrs, stop, err
		}
		cmds = append(cmds, cmd)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := addrRE.FindStringSubmatch(sc.Text()); m != nil {
				addrs = append(addrs, m[1])
				break
			}
		}
		go io.Copy(io.Discard, stderr)
	}
	return addrs, stop, nil
}

// watch prints a table row of deliveries, goroutines and RSS every
// interval until the sink has n deliveries, then the achieved rate.
func watch(addrs []string, sink *testsink.Sink, n int, every time.Duration) {
	fmt.Printf("| t (s) | delivered | goroutines per process | RSS MiB per process |\n|---:|---:|---|---|\n")
	begin := time.Now()
	for {
		var gor, rss []string
		for _, a := range addrs {
			g, r := sample(a)
			gor = append(gor, g)
			rss = append(rss, r)
		}
		d := sink.Count()
		fmt.Printf("| %.0f | %d | %s | %s |\n", time.Since(begin).Seconds(), d, strings.Join(gor, " / "), strings.Join(rss, " / "))
		if d >= n {
			break
		}
		time.Sleep(every) // sampling interval of a manual soak run
	}
	took := time.Since(begin)
	fmt.Printf("\n%d tasks in %s: %.0f/s; max in any 1s window: %d\n", n, took.Round(time.Millisecond), float64(n)/took.Seconds(),
		testsink.MaxInWindow(testsink.Times(sink.Hits()), time.Second))
}

var (
	goroutinesRE = regexp.MustCompile(`(?m)^go_goroutines (\S+)$`)
	rssRE        = regexp.MustCompile(`(?m)^process_resident_memory_bytes (\S+)$`)
)

func sample(addr string) (goroutines, rssMiB string) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return "?", "?"
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	goroutines, rssMiB = "?", "?"
	if m := goroutinesRE.FindSubmatch(b); m != nil {
		goroutines = string(m[1])
	}
	if m := rssRE.FindSubmatch(b); m != nil {
		var v float64
		fmt.Sscan(string(m[1]), &v)
		rssMiB = fmt.Sprintf("%.1f", v/(1<<20))
	}
	return
}

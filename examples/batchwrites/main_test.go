package main

import (
	"bytes"
	"regexp"
	"strconv"
	"testing"

	"github.com/shaper-io/shaper/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func TestBatchWritesStayUnderTheRate(t *testing.T) {
	var out bytes.Buffer
	if err := run(redistest.URL(t), 200, 20, "100/s", redistest.Prefix(t), &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	m := regexp.MustCompile(`committed (\d+) rows in (\d+) batches .* max rows in any 1s window: (\d+); database choked: (\d+) times`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no summary in output:\n%s", out.String())
	}
	rows, _ := strconv.Atoi(m[1])
	batches, _ := strconv.Atoi(m[2])
	maxWin, _ := strconv.Atoi(m[3])
	choked, _ := strconv.Atoi(m[4])
	if rows != 200 || batches != 10 {
		t.Errorf("committed %d rows in %d batches, want 200 in 10", rows, batches)
	}
	if maxWin > 100+20 {
		t.Errorf("max %d rows in a 1s window, want <= rate + one batch = 120", maxWin)
	}
	if choked != 0 {
		t.Errorf("the database choked %d times, want 0", choked)
	}
}

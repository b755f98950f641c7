package main_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The enqueue CLI is a producer: it links the producer side only, not the
// daemon (its Postgres sink, its embedded Redis, its status page).
func TestLinksOnlyTheProducerSide(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	banned := []string{
		"github.com/jackc/pgx",
		"github.com/alicebob/miniredis",
		"github.com/shaper-io/shaper/internal/statuspage",
		"github.com/shaper-io/shaper/internal/app",
		"github.com/shaper-io/shaper/shaping/pgsink",
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, b := range banned {
			if dep == b || strings.HasPrefix(dep, b+"/") {
				t.Errorf("cmd/enqueue depends on %s (via %s), want none of %v", dep, b, banned)
			}
		}
	}
}

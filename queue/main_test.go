package queue

import (
	"testing"

	"github.com/shaper-io/shaper/internal/redistest"
)

// TestMain starts one throwaway redis-server for the package's tests (and
// benchmarks); each test works under its own key prefix.
func TestMain(m *testing.M) { redistest.Main(m) }

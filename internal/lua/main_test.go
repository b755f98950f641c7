package lua_test

import (
	"testing"

	"github.com/shaper-io/shaper/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

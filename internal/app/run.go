package app

import (
	"context"
	"errors"
)

// RunConfigFile runs shaper from a config file until ctx ends.
func RunConfigFile(ctx context.Context, path string) error {
	return errors.New("config: not implemented yet")
}

// Package testutil holds small helpers shared by tests across packages.
package testutil

import (
	"bytes"
	"sync"
)

// SyncBuffer is a bytes.Buffer safe for a child process's output written
// while a test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

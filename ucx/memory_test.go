//go:build linux

package ucx

import (
	"os"
	"testing"
)

func TestAllocMemory(t *testing.T) {
	page := os.Getpagesize()
	m, err := AllocMemory(page+1, MemoryOptions{Lock: true})
	if err != nil {
		t.Fatal(err)
	}
	if m.Len() != 2*page || m.Addr()%uintptr(page) != 0 || !m.Locked() {
		t.Fatalf("len %d addr %#x locked %t: want two aligned, locked pages", m.Len(), m.Addr(), m.Locked())
	}
	b := m.Bytes()
	b[0], b[len(b)-1] = 1, 2
	if err := m.Free(); err != nil {
		t.Fatal(err)
	}
	if err := m.Free(); err != nil {
		t.Fatalf("second Free: %v", err)
	}
	if m.Bytes() != nil || m.Addr() != 0 || m.Len() != 0 {
		t.Fatal("freed memory still visible")
	}
	if _, err := AllocMemory(0, MemoryOptions{}); err == nil {
		t.Fatal("zero size accepted")
	}
}

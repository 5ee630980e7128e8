package ucx

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestStatusNamesAndMatching(t *testing.T) {
	err := fmt.Errorf("ucx: connect: %w", StatusUnreachable)
	if !errors.Is(err, StatusUnreachable) {
		t.Fatal("errors.Is does not find the wrapped Status")
	}
	if !strings.Contains(err.Error(), "UCS_ERR_UNREACHABLE") {
		t.Fatalf("message %q lacks UCX's name", err)
	}
	for _, s := range []Status{StatusUnreachable, StatusConnectionReset, StatusEndpointTimeout, -45, -70} {
		if !errors.Is(fmt.Errorf("wrapped: %w", s), ErrPeerFailure) {
			t.Errorf("%v (%s) should match ErrPeerFailure", s, s.Name())
		}
	}
	for _, s := range []Status{StatusOK, StatusNoMemory, StatusInvalidParam, StatusCanceled, StatusMessageTruncated} {
		if errors.Is(s, ErrPeerFailure) {
			t.Errorf("%v should not match ErrPeerFailure", s)
		}
	}
	if got := Status(-45).Name(); got != "UCS_ERR_LINK_FAILURE(-45)" {
		t.Errorf("link failure name %q", got)
	}
	if got := Status(-99).Error(); got != "UCS_STATUS(-99)" {
		t.Errorf("unknown status text %q", got)
	}
}

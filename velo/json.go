package velo

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/velo-go/velo/velo/messenger"
)

// RegisterJSONHandler registers a handler whose request and answer are JSON values.
func RegisterJSONHandler[Req, Resp any](v *Velo, name string, fn func(ctx context.Context, from InstanceID, req Req) (Resp, error)) error {
	return v.RegisterHandler(name, func(ctx context.Context, m *messenger.Message) ([]byte, error) {
		var req Req
		if err := json.Unmarshal(m.Payload, &req); err != nil {
			return nil, fmt.Errorf("decoding the %q request as %T: %w", name, req, err)
		}
		resp, err := fn(ctx, m.From, req)
		if err != nil {
			return nil, err
		}
		return json.Marshal(resp)
	})
}

// RequestJSON sends req as JSON to a handler registered with RegisterJSONHandler and decodes its answer.
func RequestJSON[Resp any](ctx context.Context, v *Velo, peer InstanceID, name string, req any) (Resp, error) {
	var resp Resp
	b, err := json.Marshal(req)
	if err != nil {
		return resp, fmt.Errorf("velo: encoding the %q request: %w", name, err)
	}
	out, err := v.Request(ctx, peer, name, b)
	if err != nil {
		return resp, err
	}
	if err := json.Unmarshal(out, &resp); err != nil {
		return resp, fmt.Errorf("velo: decoding the %q answer as %T: %w", name, resp, err)
	}
	return resp, nil
}

package jsplan

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

func TestRefused_ClassifiesUpdateErrors(t *testing.T) {
	conf := &jetstream.APIError{Code: 400, ErrorCode: 10052, Description: "stream configuration update can not change MaxConsumers"}
	full := &jetstream.APIError{Code: 500, ErrorCode: 10069, Description: "write meta.inf.tmp: no space left on device"}
	if err := refused(conf); !errors.Is(err, ErrIncompatible) {
		t.Errorf("a refused configuration: %v, want ErrIncompatible", err)
	}
	for _, e := range []error{full, context.DeadlineExceeded} {
		err := refused(e)
		if errors.Is(err, ErrIncompatible) || !errors.Is(err, e) {
			t.Errorf("%v: got %v, want the cause and not ErrIncompatible", e, err)
		}
	}
}

package addrlimit

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
)

// Refund gives back the tokens an Allowed decision of this Limiter charged, as
// WithRefund does (never above the burst). Call it once per decision; it
// ignores a decision it cannot trust and ctx's cancellation.
func (l *Limiter) Refund(ctx context.Context, d Decision) {
	l.mustBeBuilt()
	ps := l.pols.Load().byName[d.Policy]
	if d.Outcome != Allowed || d.Key == "" || ps == nil || d.Cost < 1 || d.Cost > ps.maxCost {
		return
	}
	l.refundCharge(ctx, ps, l.keys.of(d.Key), &d)
}

// statusWriter records the status of the response a handler writes, for
// WithRefund. It passes everything through: Flush, Hijack and ReadFrom
// delegate to the wrapped ResponseWriter (through http.ResponseController,
// which follows Unwrap), and Unwrap lets ResponseController reach its other
// methods (deadlines, full duplex).
type statusWriter struct {
	http.ResponseWriter
	code     int
	hijacked bool
}

// status is the status the client got, if this writer saw it: the first
// final one written (net/http sends what was written before a hijack), or 101
// for a connection hijacked before any status. It reports false when nothing
// was written: net/http would then send 200, but a framework may still write
// the real response after the middleware returned (echo renders a returned
// error then), so nothing written is never taken for a success.
func (w *statusWriter) status() (int, bool) {
	switch {
	case w.code != 0:
		return w.code, true
	case w.hijacked:
		return http.StatusSwitchingProtocols, true
	}
	return 0, false
}

func (w *statusWriter) WriteHeader(code int) {
	// 1xx responses are informational and not the status, except 101, which
	// net/http treats as final.
	if w.code == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// ReadFrom lets io.Copy use the wrapped writer's ReadFrom (sendfile) when it
// has one.
func (w *statusWriter) ReadFrom(src io.Reader) (int64, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(src)
	}
	return io.Copy(writerOnly{w.ResponseWriter}, src)
}

// writerOnly hides ReadFrom so that io.Copy does not call it again.
type writerOnly struct{ io.Writer }

func (w *statusWriter) Flush() {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		w.hijacked = true
	}
	return c, rw, err
}

// Unwrap returns the wrapped ResponseWriter, for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

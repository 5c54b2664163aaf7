// Package ginadapter mounts the idemkit server middleware in a gin router
// (github.com/gin-gonic/gin), carrying every write of the handlers after it
// through the middleware, so that their responses are stored and replayed:
//
//	mw, err := server.New(store, &server.Config{PrincipalFunc: principal})
//	r := gin.New()
//	r.POST("/v1/orders/:id/pay", ginadapter.Middleware(mw), pay)
//	r.POST("/v1/refunds", ginadapter.Operation(mw, "refunds.create"), refund)
//
// Handlers read path parameters as usual (c.Param("id")); net/http handlers
// mounted with gin.WrapH read them with r.PathValue. It lives in its own
// package so that a program without gin does not link it.
//
// gin.WrapH(mw.Wrap(h)) is not enough for a gin route: gin's path
// parameters do not reach h. Calling c.Next inside mw.Wrap without this
// adapter is worse: the handlers write to gin's own writer, around the
// middleware, which then sees nothing written (see the problem type
// response-not-captured).
package ginadapter

import (
	"bufio"
	"io"
	"net"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idemkit/server"
)

// Middleware returns a gin middleware that runs the rest of the chain under
// mw: the request is claimed before the next handlers run, their response
// is written through mw's writer and stored, and a duplicate is answered by
// mw (a replay, 409, 422) without running them.
func Middleware(mw *server.Middleware) gin.HandlerFunc {
	return handler(mw, "")
}

// Operation is Middleware for a route whose keys are scoped to the
// operation name (see server.Operation): the same key on another operation
// is independent. It panics if name is not a valid operation name, like
// server.Operation.
func Operation(mw *server.Middleware, name string) gin.HandlerFunc {
	server.Operation(http.NotFoundHandler(), name) // validates name at registration
	return handler(mw, name)
}

func handler(mw *server.Middleware, operation string) gin.HandlerFunc {
	return func(c *gin.Context) {
		r := c.Request
		for _, p := range c.Params {
			r.SetPathValue(p.Key, p.Value)
		}
		var next http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			outer, outerReq := c.Writer, c.Request
			cw := &writer{w: w}
			c.Writer, c.Request = cw, r
			defer func() { c.Writer, c.Request = outer, outerReq }()
			c.Next()
			cw.WriteHeaderNow() // a status set with c.Status alone
		})
		if operation != "" {
			next = server.Operation(next, operation)
		}
		mw.Wrap(next).ServeHTTP(c.Writer, r)
		c.Abort() // the chain ran inside, or mw answered without it
	}
}

// writer is the gin.ResponseWriter the handlers after the middleware
// write through: the middleware's writer, with gin's deferred status.
type writer struct {
	w      http.ResponseWriter
	status int
	size   int // -1 until the header is written
	begun  bool
}

var _ gin.ResponseWriter = (*writer)(nil)

func (cw *writer) Header() http.Header { return cw.w.Header() }

// WriteHeader records the status; it is written with the first Write or
// WriteHeaderNow, as gin's own writer does.
func (cw *writer) WriteHeader(code int) {
	if code > 0 && !cw.begun {
		cw.status = code
	}
}

func (cw *writer) WriteHeaderNow() {
	if cw.begun || cw.status == 0 {
		return // written, or nothing set: the middleware's writer is left as the handler left it
	}
	cw.begun = true
	cw.w.WriteHeader(cw.status)
}

func (cw *writer) Write(p []byte) (int, error) {
	if cw.status == 0 {
		cw.status = http.StatusOK
	}
	cw.WriteHeaderNow()
	n, err := cw.w.Write(p)
	cw.size += n
	return n, err
}

func (cw *writer) WriteString(s string) (int, error) { return cw.Write([]byte(s)) }

func (cw *writer) Status() int {
	if cw.status == 0 {
		return http.StatusOK
	}
	return cw.status
}

func (cw *writer) Size() int {
	if !cw.begun {
		return -1
	}
	return cw.size
}

func (cw *writer) Written() bool { return cw.begun }

func (cw *writer) Flush() {
	if cw.status == 0 {
		cw.status = http.StatusOK
	}
	cw.WriteHeaderNow()
	_ = http.NewResponseController(cw.w).Flush()
}

func (cw *writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(cw.w).Hijack()
}

// CloseNotify implements http.CloseNotifier, which gin.ResponseWriter
// requires; it never fires (use the request's context).
func (cw *writer) CloseNotify() <-chan bool { return make(chan bool) }

func (cw *writer) Pusher() http.Pusher {
	p, _ := cw.w.(http.Pusher)
	return p
}

// Unwrap returns the middleware's writer, for http.ResponseController.
func (cw *writer) Unwrap() http.ResponseWriter { return cw.w }

var _ io.StringWriter = (*writer)(nil)

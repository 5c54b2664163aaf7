// Package echoadapter mounts the idemkit server middleware in an echo v4
// router (github.com/labstack/echo/v4), carrying every write of the
// handler through the middleware, so that its response is stored and
// replayed:
//
//	mw, err := server.New(store, &server.Config{PrincipalFunc: principal})
//	e := echo.New()
//	e.POST("/v1/orders/:id/pay", pay, echoadapter.Middleware(mw))
//	e.POST("/v1/refunds", refund, echoadapter.Operation(mw, "refunds.create"))
//
// Handlers read path parameters as usual (c.Param("id"), and r.PathValue
// for net/http handlers mounted with echo.WrapHandler). An error a handler
// returns is answered by the echo instance's HTTPErrorHandler through the
// middleware, so a 4xx it makes is stored like any other answer, and a 5xx
// frees the key. It lives in its own package so that a program without
// echo does not link it.
package echoadapter

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/idemkit/idemkit/server"
)

// Middleware returns an echo middleware that runs the handler under mw:
// the request is claimed before it runs, its response is written through
// mw's writer and stored, and a duplicate is answered by mw (a replay, 409,
// 422) without running it.
func Middleware(mw *server.Middleware) echo.MiddlewareFunc {
	return middleware(mw, "")
}

// Operation is Middleware for a route whose keys are scoped to the
// operation name (see server.Operation). It panics if name is not a valid
// operation name, like server.Operation.
func Operation(mw *server.Middleware, name string) echo.MiddlewareFunc {
	server.Operation(http.NotFoundHandler(), name) // validates name at registration
	return middleware(mw, name)
}

func middleware(mw *server.Middleware, operation string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			names, values := c.ParamNames(), c.ParamValues()
			for i, name := range names {
				if i < len(values) {
					r.SetPathValue(name, values[i])
				}
			}
			var inner http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				outer, outerReq := c.Response(), c.Request()
				c.SetResponse(echo.NewResponse(w, c.Echo()))
				c.SetRequest(r)
				defer func() {
					c.SetResponse(outer)
					c.SetRequest(outerReq)
				}()
				if err := next(c); err != nil {
					// Answered here, through the middleware's writer, so that
					// the error's status decides what is stored.
					c.Error(err)
				}
			})
			if operation != "" {
				inner = server.Operation(inner, operation)
			}
			mw.Wrap(inner).ServeHTTP(c.Response(), r)
			return nil
		}
	}
}

// A payments endpoint protected by express-idempotency, the way its README
// shows: the middleware on the route, the handler returning early on a
// hit. POST /v1/payments {"amount": <positive integer>, "currency": "..."}
// answers 201 {"id": "pay_N", ...} after DELAY_MS; a bad amount is a 400.
// Prints "listening on http://127.0.0.1:PORT" once it accepts connections.
const express = require('express');
const { idempotency, getSharedIdempotencyService } = require('express-idempotency');

const delay = Number(process.env.DELAY_MS || 0);
const app = express();
app.use(express.json());
let n = 0;
app.post('/v1/payments', idempotency(), (req, res) => {
  if (getSharedIdempotencyService().isHit(req)) {
    return;
  }
  const account = (req.get('authorization') || '').replace(/^Bearer /, '');
  if (!account) {
    res.status(401).json({ error: 'unauthenticated' });
    return;
  }
  const amount = req.body && req.body.amount;
  if (!Number.isInteger(amount) || amount <= 0) {
    res.status(400).json({ error: 'invalid amount' });
    return;
  }
  setTimeout(() => {
    n++;
    res.status(201).json({ id: 'pay_' + n, account, amount, currency: req.body.currency, created_at: new Date().toISOString() });
  }, delay);
});
const srv = app.listen(0, '127.0.0.1', () => {
  console.log('listening on http://127.0.0.1:' + srv.address().port);
});

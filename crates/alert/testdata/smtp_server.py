"""A real SMTP server for the email receiver's tests (aiosmtpd).

usage: smtp_server.py MODE PORT OUT [CERT KEY]
  MODE: starttls (STARTTLS required), tls (implicit TLS) or plain.
AUTH LOGIN/PLAIN is required with user "strata", password "s3cret". Every message received
is appended to OUT as one JSON line: envelope, headers, the text and HTML parts, whether the
session was encrypted and who logged in. Prints "ready" when listening; stops when stdin closes.
"""
import email
import json
import ssl
import sys
from email import policy

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

mode, port, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]


class Handler:
    async def handle_DATA(self, server, session, envelope):
        msg = email.message_from_bytes(envelope.original_content, policy=policy.default)
        plain = msg.get_body(("plain",))
        html = msg.get_body(("html",))
        rec = {
            "from": envelope.mail_from,
            "to": envelope.rcpt_tos,
            "subject": str(msg["subject"]),
            "message_id": str(msg["message-id"]),
            "content_type": msg.get_content_type(),
            "text": plain.get_content() if plain is not None else None,
            "html": html.get_content() if html is not None else None,
            "tls": session.ssl is not None or mode == "tls",
            "login": session.auth_data.login.decode()
            if isinstance(session.auth_data, LoginPassword)
            else None,
        }
        with open(out, "a") as f:
            f.write(json.dumps(rec) + "\n")
        return "250 OK"


def authenticator(server, session, envelope, mechanism, auth_data):
    ok = (
        isinstance(auth_data, LoginPassword)
        and auth_data.login == b"strata"
        and auth_data.password == b"s3cret"
    )
    # handled=False: aiosmtpd answers a failure with its own 535.
    return AuthResult(success=ok, handled=False, auth_data=auth_data if ok else None)


kw = dict(hostname="127.0.0.1", port=port, authenticator=authenticator, auth_required=True)
if mode in ("starttls", "tls"):
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(sys.argv[4], sys.argv[5])
    if mode == "starttls":
        kw.update(tls_context=ctx, require_starttls=True)
    else:
        # The whole session is TLS; aiosmtpd only knows of STARTTLS, so allow AUTH here.
        kw.update(ssl_context=ctx, auth_require_tls=False)
else:
    kw.update(auth_require_tls=False)

controller = Controller(Handler(), **kw)
controller.start()
print("ready", flush=True)
sys.stdin.read()
controller.stop()

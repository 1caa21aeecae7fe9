"""A small real IMAP4rev1 server on loopback (asyncio), enough for ``imaplib``'s LOGIN, SELECT /
EXAMINE, SEARCH HEADER Message-ID and LOGOUT: the sending mailbox's Sent folder, read by the delivery
reconciliation. Its messages are whatever ``messages()`` returns when searched (for example what an
aiosmtpd sink received), so a relay that keeps a copy in Sent is modelled without a mail suite."""

from __future__ import annotations

import asyncio
import email
import shlex
import threading
from collections.abc import Callable, Sequence
from email.policy import default

from stack.launcher import free_port

Messages = Callable[[], Sequence[bytes]]


class ImapServer:
    """Serves one folder (``folder``) to one user on its own thread's event loop."""

    def __init__(self, messages: Messages, user: str = "agent", password: str = "secret") -> None:
        self.messages = messages
        self.user, self.password = user, password
        self.folder = "Sent"
        self.port = free_port()
        self.searches = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"imap://{self.user}:{self.password}@127.0.0.1:{self.port}/{self.folder}"

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._session, "127.0.0.1", self.port)

    def stop(self) -> None:
        async def close() -> None:
            assert self._server is not None
            self._server.close()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        def send(line: str) -> None:
            writer.write(line.encode() + b"\r\n")

        send("* OK [CAPABILITY IMAP4rev1] test IMAP ready")
        authed = selected = False
        try:
            while line := (await reader.readline()).decode().rstrip("\r\n"):
                tag, _, rest = line.partition(" ")
                command, _, args = rest.partition(" ")
                command = command.upper()
                words = shlex.split(args) if args else []
                if command == "CAPABILITY":
                    send("* CAPABILITY IMAP4rev1")
                    send(f"{tag} OK CAPABILITY completed")
                elif command == "NOOP":
                    send(f"{tag} OK NOOP completed")
                elif command == "LOGIN":
                    authed = words == [self.user, self.password]
                    send(f"{tag} OK LOGIN completed" if authed else f"{tag} NO [AUTHENTICATIONFAILED]")
                elif command in ("SELECT", "EXAMINE") and authed:
                    selected = bool(words) and words[0] == self.folder
                    if not selected:
                        send(f"{tag} NO [NONEXISTENT] no such mailbox")
                        continue
                    send(f"* {len(self.messages())} EXISTS")
                    send("* 0 RECENT")
                    send("* FLAGS (\\Seen)")
                    send(f"{tag} OK [READ-ONLY] {command} completed")
                elif command == "SEARCH" and selected:
                    send(f"* SEARCH {' '.join(self._search(words))}".rstrip())
                    send(f"{tag} OK SEARCH completed")
                elif command == "LOGOUT":
                    send("* BYE logging out")
                    send(f"{tag} OK LOGOUT completed")
                    break
                else:
                    send(f"{tag} BAD {command} is not understood here")
                await writer.drain()
            await writer.drain()
        except ConnectionError:
            pass  # the client died mid-session (a killed process): nothing to answer
        finally:
            writer.close()

    def _search(self, words: list[str]) -> list[str]:
        """``[CHARSET x] HEADER <name> <value>``: sequence numbers whose header contains the value."""
        if words[:1] and words[0].upper() == "CHARSET":
            words = words[2:]
        if len(words) != 3 or words[0].upper() != "HEADER":
            return []
        self.searches += 1
        name, value = words[1], words[2].lower()
        hits = []
        for number, raw in enumerate(self.messages(), start=1):
            header = email.message_from_bytes(raw, policy=default).get(name)
            if header is not None and value in str(header).lower():
                hits.append(str(number))
        return hits

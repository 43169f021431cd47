"""``stratagym serve webshop``: the WebShop site on 127.0.0.1 (heavy imports stay inside the command)."""

from __future__ import annotations

from typing import Optional

import typer

from stratagym.display import esc


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    serve = groups["serve"]

    @serve.command("webshop")
    def serve_webshop(
        host: str = typer.Option("127.0.0.1", help="Interface to bind (127.0.0.1 keeps the site local)."),
        port: int = typer.Option(3000, min=0, max=65535, help="Port (0: a free one)."),
        split: str = typer.Option("all", help="Goals sessions draw from: test, eval, train or all."),
        data_dir: Optional[str] = typer.Option(None, help="A catalog in the bundled layout (default data/webshop)."),
        items_path: Optional[str] = typer.Option(None, help="WebShop's items_shuffle*.json instead of the bundled catalog."),
        attrs_path: Optional[str] = typer.Option(None, help="WebShop's items_ins_v2*.json."),
        human_ins_path: Optional[str] = typer.Option(None, help="WebShop's items_human_ins.json."),
        search_backend: str = typer.Option("auto", help="auto (pyserini with --items-path, else bm25s), bm25s or pyserini."),
        show_attrs: bool = typer.Option(False, help="Show the Attributes sub-page button."),
    ) -> None:
        """Serve the WebShop web site (same pages as stratagym/WebShop-v0) until interrupted."""
        from rich.console import Console

        # lazy: the site and web app need the webshop extra (rapidfuzz, flask; ~250 ms); `stratagym --help` stays fast
        from stratagym.envs.webshop.site_config import SiteConfig, build_site
        from stratagym.envs.webshop.web import create_app
        from stratagym.serving import serve_in_thread

        console = Console()
        site = build_site(SiteConfig(data_dir=data_dir, items_path=items_path, attrs_path=attrs_path,
                                     human_ins_path=human_ins_path, search_backend=search_backend, show_attrs=show_attrs))
        if host not in ("127.0.0.1", "localhost", "::1"):
            console.print(f"[yellow]warning[/yellow]: binding {esc(host)} exposes the site beyond this machine")
        server = serve_in_thread(create_app(site, split=split), host, port, name="webshop-server")
        console.print(
            f"WebShop: {len(site.catalog.products)} products, {len(site.catalog.task_ids(split))} goals ({split}); "
            f"open {server.url}/ (Ctrl-C stops)"
        )
        try:
            import threading

            threading.Event().wait()
        except KeyboardInterrupt:
            pass
        finally:
            server.stop()

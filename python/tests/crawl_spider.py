"""A spider for the tests: crawls a generated site from one start URL, following every link.

Usage: python crawl_spider.py START_URL [SETTING=VALUE ...]
"""

import sys

import scrapy
from scrapy.crawler import CrawlerProcess


class FailInputMiddleware:
    """FAIL_INPUT_EVERY=n: a spider middleware that raises before the callback of every
    n-th page (no errback, no other middleware handles it)."""

    def __init__(self, every):
        self.every = every

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler.settings.getint("FAIL_INPUT_EVERY"))

    def process_spider_input(self, response, spider=None):  # Scrapy < 2.14 passes spider
        if int(response.url.rsplit("/", 1)[1]) % self.every == 1:
            raise RuntimeError(f"test: input of {response.url} rejected")


class RescueMiddleware:
    """RESCUE_EVERY=n: the callback of every n-th page raises before it yields anything,
    and this middleware (inside BloomDoneMiddleware) handles the exception by returning
    the page's links itself: requests that reach the engine through another middleware's
    ``process_spider_exception``, not through the callback."""

    def __init__(self, crawler):
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler)

    def process_spider_exception(self, response, exception, spider=None):  # Scrapy < 2.14 passes spider
        if not str(exception).startswith("test: rescued"):
            return None
        return [
            response.follow(href, callback=self.crawler.spider.parse)
            for href in response.css("a::attr(href)").getall()
        ]


class SiteSpider(scrapy.Spider):
    name = "site"

    def __init__(self, start_url, **kw):
        super().__init__(**kw)
        self.start_url = start_url

    def _start_request(self):
        # Not dont_filter by default: a resumed crawl must not fetch a recorded start page
        # again. START_DONT_FILTER=1 makes it Scrapy's usual start request instead.
        dont_filter = self.settings.getbool("START_DONT_FILTER")
        return scrapy.Request(self.start_url, callback=self.parse, dont_filter=dont_filter)

    async def start(self):
        yield self._start_request()

    def start_requests(self):  # Scrapy < 2.13
        yield self._start_request()

    def parse(self, response):
        rescue = self.settings.getint("RESCUE_EVERY")
        if rescue and int(response.url.rsplit("/", 1)[1]) % rescue == 0:
            raise RuntimeError(f"test: rescued {response.url}")
        # RAISE_EVERY=n: the callback of every n-th page fails after yielding its links.
        every = self.settings.getint("RAISE_EVERY")
        # CHILD_DONT_FILTER_EVERY=n: links to every n-th page (but the root) are followed
        # with dont_filter, once per page, and links to the page itself not at all (one
        # with dont_filter was never seen): for tree-shaped sites, where such a page's only
        # link is on its parent.
        unfiltered = self.settings.getint("CHILD_DONT_FILTER_EVERY")
        me = response.url.rsplit("/", 1)[1]
        followed = set()
        for href in response.css("a::attr(href)").getall():
            j = href.rsplit("/", 1)[1]
            dont = (
                bool(unfiltered)
                and j.isdigit()
                and int(j) % unfiltered == 1
                and j != "0"
            )
            if unfiltered and j == me or dont and j in followed:
                continue
            followed.add(j)
            yield response.follow(href, callback=self.parse, dont_filter=dont)
        if every and int(response.url.rsplit("/", 1)[1]) % every == 0:
            raise ValueError(f"test: callback of {response.url} fails")


def main():
    start = sys.argv[1]
    settings = {
        "CONCURRENT_REQUESTS": 32,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 32,
        "DOWNLOAD_DELAY": 0,
        "ROBOTSTXT_OBEY": False,
        "LOG_LEVEL": "INFO",
        "TELNETCONSOLE_ENABLED": False,
        "COOKIES_ENABLED": False,
        "RETRY_ENABLED": True,
        "DUPEFILTER_CLASS": "bloomsled.scrapy.BloomDupeFilter",
        "SPIDER_MIDDLEWARES": {"bloomsled.scrapy.BloomDoneMiddleware": 0},
        "BLOOMSLED_EXPECTED_ITEMS": 100000,
        "LOGSTATS_INTERVAL": 5,
    }
    for arg in sys.argv[2:]:
        k, _, v = arg.partition("=")
        settings[k] = v
    if settings.pop("NO_DONE_MIDDLEWARE", None):
        del settings["SPIDER_MIDDLEWARES"]
    if settings.get("FAIL_INPUT_EVERY"):
        settings["SPIDER_MIDDLEWARES"]["__main__.FailInputMiddleware"] = 100
    if settings.get("RESCUE_EVERY"):
        settings["SPIDER_MIDDLEWARES"]["__main__.RescueMiddleware"] = 100
    if settings.pop("NO_BLOOMSLED", None):  # left to ADDONS
        del settings["SPIDER_MIDDLEWARES"], settings["DUPEFILTER_CLASS"]
    process = CrawlerProcess(settings)
    process.crawl(SiteSpider, start_url=start)
    process.start()


if __name__ == "__main__":
    main()

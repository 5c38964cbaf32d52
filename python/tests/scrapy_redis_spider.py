"""A spider for the scrapy-redis tests: crawls a generated site under scrapy-redis's
scheduler (one request queue in Redis shared by every process), following every link.

Usage: python scrapy_redis_spider.py START_URL|redis [SETTING=VALUE ...]

With ``redis`` instead of a URL it is a ``scrapy_redis.spiders.RedisSpider`` reading its
start URLs from ``site:start_urls`` (``MAX_IDLE_TIME_BEFORE_CLOSE`` closes it once idle).
"""

import sys
import time

import scrapy
from scrapy import signals
from scrapy.crawler import CrawlerProcess
from scrapy.exceptions import DontCloseSpider
from scrapy_redis.spiders import RedisSpider


class SiteSpider(scrapy.Spider):
    """IDLE_WAIT=s: stays open until it has been idle for s seconds (as RedisSpider's
    MAX_IDLE_TIME_BEFORE_CLOSE): the engine asks scrapy-redis's queue for requests again
    at each idle heartbeat, so a process that found the shared queue empty for a moment
    (the other one popped it) keeps working instead of closing at once."""

    name = "site"

    def __init__(self, start_url, **kw):
        super().__init__(**kw)
        self.start_url = start_url
        self.idle_since = None

    @classmethod
    def from_crawler(cls, crawler, *args, **kwargs):
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider.idle, signal=signals.spider_idle)
        return spider

    def idle(self):
        now = time.monotonic()
        if self.idle_since is None:
            self.idle_since = now
        if now - self.idle_since < self.settings.getfloat("IDLE_WAIT"):
            raise DontCloseSpider

    async def start(self):
        yield scrapy.Request(self.start_url, callback=self.parse)

    def start_requests(self):  # Scrapy < 2.13
        yield scrapy.Request(self.start_url, callback=self.parse)

    def parse(self, response):
        self.idle_since = None
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)


class SiteRedisSpider(RedisSpider):
    name = "site"

    def parse(self, response):
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)


def main():
    start = sys.argv[1]
    settings = {
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "DUPEFILTER_CLASS": "bloomsled.scrapy.RedisBloomDupeFilter",
        "CONCURRENT_REQUESTS": 8,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 8,
        "DOWNLOAD_DELAY": 0,
        "ROBOTSTXT_OBEY": False,
        "LOG_LEVEL": "INFO",
        "TELNETCONSOLE_ENABLED": False,
        "COOKIES_ENABLED": False,
        "RETRY_ENABLED": False,  # a failed page must show as unfetched, not be retried late
        "BLOOMSLED_EXPECTED_ITEMS": 100000,
        "LOGSTATS_INTERVAL": 5,
    }
    for arg in sys.argv[2:]:
        k, _, v = arg.partition("=")
        settings[k] = v
    process = CrawlerProcess(settings)
    if start == "redis":
        process.crawl(SiteRedisSpider)
    else:
        process.crawl(SiteSpider, start_url=start)
    process.start()


if __name__ == "__main__":
    main()

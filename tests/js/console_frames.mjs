// Opens the console on a session and, once its stream ends, prints the page's frame statistics
// (window.consoleStats) as JSON: used by bench/console_frames.py.
//
//   node console_frames.mjs <console url> <timeout seconds>
import { chromium } from "playwright-core";

const [url, timeout = "120"] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         "--disable-dev-shm-usage"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const errors = [];
  page.on("pageerror", (error) => errors.push(String(error)));
  // Every frame the browser renders, whether or not the console had work in it.
  await page.addInitScript(() => {
    window.frameProbe = [];
    let last = 0;
    const tick = (now) => {
      if (last) window.frameProbe.push(now - last);
      last = now;
      requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
  });
  await page.goto(url);
  await page.waitForSelector("#status.completed", { timeout: Number(timeout) * 1000 });
  const stats = await page.evaluate(() => {
    const s = window.consoleStats;
    return { frames: s.frames, chunks: s.chunks, work: s.work, intervals: window.frameProbe,
             agents: document.querySelectorAll(".agent").length,
             textLength: [...document.querySelectorAll(".agent > .text")].reduce((n, el) => n + el.textContent.length, 0) };
  });
  process.stdout.write(JSON.stringify({ ...stats, errors }));
} finally {
  await browser.close();
}

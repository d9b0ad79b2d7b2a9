// Drives the web console in headless Chromium with playwright-core, as a person would, and
// prints what it saw as JSON for the Python test.
//
//   node console.mjs <console url> <api key> [screenshot path]
//
// Starts a tree run from the page, watches it live, interrupts it, resumes it to the end; then
// starts a run that pauses for a client tool and an approval, and answers both in the form;
// then a run whose step is redone.
import { chromium } from "playwright-core";

const [url, key, screenshot] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         "--disable-dev-shm-usage"],
});
const result = { steps: [], errors: [] };
const step = (name, data = {}) => result.steps.push({ name, ...data });
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on("pageerror", (error) => result.errors.push(String(error)));
  // Refused requests show up as console errors too (the page loads before it has the key):
  // only the page's own errors count.
  page.on("console", (message) => {
    if (message.type() === "error" && !message.text().startsWith("Failed to load resource")) {
      result.errors.push(message.text());
    }
  });
  await page.goto(url);
  await page.fill("#key", key);
  await page.dispatchEvent("#key", "change");
  await page.waitForSelector("#agent option[value=boss]", { state: "attached" });

  // A tree run, started from the page and watched live.
  await page.selectOption("#agent", "boss");
  await page.fill("#message", "How are things?");
  await page.click("#start-button");
  await page.waitForSelector("#status.running");
  const id = await page.textContent("#title");
  await page.waitForSelector(`.agent[data-id="${id}-sub-m1"]`);
  step("live", {
    id,
    status: await page.textContent("#status"),
    agents: await page.$$eval(".agent", (els) => els.length),
  });

  // Interrupted while it runs, then resumed to the end.
  await page.click("#interrupt");
  await page.waitForSelector("#status.interrupted", { timeout: 20000 });
  step("interrupted", { rootBadge: await page.textContent(`.agent[data-id="${id}"] .status`) });
  await page.click("#resume");
  await page.waitForSelector("#status.completed", { timeout: 30000 });
  step("completed", {
    rootText: await page.textContent(`.agent[data-id="${id}"] > .text`),
    badges: await page.$$eval(".agent", (els) => els.map((el) => [el.dataset.id, el.querySelector(".status").textContent])),
    sessions: await page.$$eval("#sessions li", (els) => els.map((el) => el.dataset.id)),
  });

  // A run that waits for the client: the form answers a client tool and an approval.
  await page.selectOption("#agent", "shopper");
  await page.fill("#message", "buy");
  await page.click("#start-button");
  await page.waitForSelector("#pending:not([hidden]) .call[data-call=q]", { timeout: 20000 });
  step("pending", { calls: await page.$$eval("#pending .call", (els) => els.map((el) => el.dataset.call)) });
  await page.fill("input[name=result-q]", "Oslo");
  await page.check("input[name=approve-p][value=yes]");
  await page.click("#answer");
  await page.waitForSelector("#status.completed", { timeout: 30000 });
  const shopper = await page.textContent("#title");
  step("answered", {
    text: await page.textContent(`.agent[data-id="${shopper}"] > .text`),
    pendingHidden: await page.$eval("#pending", (el) => el.hidden),
  });

  // A run whose model call is retried after its text was shown: the void text goes.
  await page.selectOption("#agent", "retrier");
  await page.fill("#message", "try");
  await page.click("#start-button");
  await page.waitForFunction(() => {
    const title = document.querySelector("#title").textContent;
    const text = document.querySelector(`.agent[data-id="${title}"] > .text`);
    return text && text.textContent.endsWith("works.") &&
      document.querySelector("#status").classList.contains("completed");
  }, null, { timeout: 30000 });
  const retried = await page.textContent("#title");
  step("redone", { text: await page.textContent(`.agent[data-id="${retried}"] > .text`) });

  if (screenshot) {
    // A run left alone, for the README.
    await page.selectOption("#agent", "boss");
    await page.fill("#message", "How are things?");
    await page.click("#start-button");
    await page.waitForSelector("#status.running");
    await page.waitForSelector("#status.completed", { timeout: 30000 });
    await page.waitForSelector("#sessions li .status.running", { state: "detached" });
    await page.screenshot({ path: screenshot, fullPage: false });
  }
} catch (error) {
  result.errors.push(String(error && error.stack || error));
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(result));

// Opens a page in headless Chromium, waits until it sets `window.ended`, and prints that and
// the page's text as JSON.
//
//   node follow_page.mjs <page url>
import { chromium } from "playwright-core";

const [url] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"],
});
const result = { errors: [] };
try {
  const page = await browser.newPage();
  page.on("pageerror", (error) => result.errors.push(String(error)));
  await page.goto(url);
  await page.waitForFunction(() => window.ended !== undefined, null, { timeout: 30000 });
  result.ended = await page.evaluate(() => window.ended);
  result.text = await page.textContent("#out");
} catch (error) {
  result.errors.push(String(error));
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(result));

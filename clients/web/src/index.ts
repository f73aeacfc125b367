// privbandit web client (issue 41): the device role in the browser.
